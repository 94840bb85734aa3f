"""The suite's row for default against itself (benchmarks/suite.py --redrawn): the default
scheduler on other simulator seeds, compared with default as every policy is. Without it the
suite's per-workload bars (issue 28: no workload's makespan 5% above default's, no job 2x its
default completion) have no floor: default's own placement ties, falling otherwise, move a
job by several times its completion (docs/results.md, "Default against itself")."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from specon.sim.generate import family_workload
from specon.sim.model import SimConfig
from specon.sim.runner import run_one

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("suite", ROOT / "benchmarks/suite.py")
assert _spec is not None and _spec.loader is not None
suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite)


def test_the_redrawn_row_is_default_on_other_seeds_compared_job_by_job() -> None:
    row = suite.one_workload(("bursty", 8, ["default", suite.REDRAWN], [0, 1], {}))
    wl = family_workload("bursty", 8)
    cfg = SimConfig(record_timeline=False)
    mine = {s: {j.name: j.completion_s for j in run_one(wl, "default", cfg, s).jobs}
            for s in (0, 1, suite.REDRAW_OFFSET, suite.REDRAW_OFFSET + 1)}
    ratios = sorted((mine[suite.REDRAW_OFFSET][n] + mine[suite.REDRAW_OFFSET + 1][n])
                    / (mine[0][n] + mine[1][n]) for n in mine[0])
    got = row["policies"][suite.REDRAWN]["slowdowns"]
    assert got == ratios
    # the point of the row: on this heterogeneous bursty cluster (speeds 0.29-3.09) another
    # draw of default's ties puts some job where it takes over twice as long
    assert max(got) > 2.0 and min(got) < 0.5


def test_the_suite_prints_the_redrawn_row_only_when_asked() -> None:
    base = [sys.executable, str(ROOT / "benchmarks/suite.py"), "--workloads", "1", "--seeds",
            "1", "--policies", "default", "--processes", "1"]
    for extra, shown in (([], False), (["--redrawn"], True)):
        out = subprocess.run([*base, *extra, "--out", "/dev/null"], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert (f"| {suite.REDRAWN} |" in out.stdout) is shown, out.stdout


def test_workload_seeds_tells_per_seed_changes_and_refuses_bad_input() -> None:
    tool = [sys.executable, str(ROOT / "benchmarks/workload_seeds.py")]
    out = subprocess.run([*tool, "standard", "0", "--seeds", "2"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    for label in ("average completion", "makespan", "time to 90%"):
        assert f"{label}: means of seeds 0-1" in out.stdout and "of 2;" in out.stdout
    assert "worst job over all 2 seeds' means" in out.stdout
    for bad, said in ((["nope", "0"], "unknown family 'nope'"),
                      (["standard", "0", "--policy", "oracle"], "not a policy to set"),
                      (["standard", "0", "--unlabelled"], "--unlabelled needs --manager-view")):
        out = subprocess.run([*tool, *bad], capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr
