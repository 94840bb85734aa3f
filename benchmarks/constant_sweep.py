"""What one constant of the progress policy trades: the random suite with the constant set to
each value in turn, the shipped policy against default on the same workloads and seeds.

Issue 28 asks for the trade-off curve between time to 90% of the loss reduction and average
completion to be measured, and the point shipped that meets every bar; this prints that curve
for a constant of `specon/core/progress.py` or `specon/core/placement.py` that the rules
read when they run (SWEEPABLE: the early key's `EARLY_FACTOR`, the starvation guard's
`FAIR_LAG`, the placement bounds ...), one row per value in the suite's columns
(benchmarks/suite.py), default run once per workload and seed.

    python benchmarks/constant_sweep.py EARLY_FACTOR 0.5,1,2 --family widened --workloads 12
    python benchmarks/constant_sweep.py FAIR_LAG 1.1,1.25 --family widened --first 12 \\
        --workloads 30 --noise standard
        # the 180 held out, with noisy logs

The view arguments are the suite's (`--noise`, `--manager-view`, `--unlabelled` ...). The
constant is set in each worker process before its runs and put back after; nothing else
changes, so each row is what shipping that value would give in the simulator.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from suite import (  # noqa: E402
    add_set_args,
    add_view_args,
    completions,
    markdown,
    means,
    run_all,
    set_families,
    slowdowns,
    summarise,
    view_config,
)

import specon.core.placement as placement  # noqa: E402
import specon.core.progress as progress  # noqa: E402
from specon.sim.generate import family_workload  # noqa: E402
from specon.sim.model import SimConfig  # noqa: E402
from specon.sim.runner import run_one  # noqa: E402

#: The constants read when a rule runs, so that setting the module's attribute changes the
#: rule, each with its module. Not these: CANDIDATES, KIND_NODES and FLOOR_CORES are imported
#: by value elsewhere or bound as default arguments, as TOLERANCE is.
OWNERS: dict[str, Any] = {
    **dict.fromkeys(("EARLY_FACTOR", "FAIR_LAG", "CRITICAL_SHARE", "LAST_JOB_SLACK",
                     "FLOOR_SHARE"), progress),
    **dict.fromkeys(("OWN_TIME_BOUND", "SERIAL_TIME_BOUND", "UNKNOWN_WORK_S", "FASTEST"),
                    placement),
}
SWEEPABLE = tuple(OWNERS)


def constants() -> dict[str, int | float]:
    """The constants a sweep may set, with their shipped values."""
    return {k: getattr(OWNERS[k], k) for k in SWEEPABLE}


def one_workload(args: tuple[str, int, list[int], dict[str, Any], str, list[float]]
                 ) -> list[dict[str, Any]]:
    """One workload: default once, then the policy with ``name`` at each of ``values``; a
    suite row (benchmarks/suite.py's form) per value."""
    family, index, seeds, cfg_kw, name, values = args
    wl = family_workload(family, index)
    cfg = SimConfig(record_timeline=False, **cfg_kw)

    base_runs = [run_one(wl, "default", cfg, s) for s in seeds]
    base, base_jobs = means(base_runs), completions(base_runs)
    owner = OWNERS[name]
    shipped = getattr(owner, name)
    out = []
    try:
        for v in values:
            setattr(owner, name, type(shipped)(v))
            runs = [run_one(wl, "progress", cfg, s) for s in seeds]
            mine = dict(means(runs), slowdowns=sorted(
                slowdowns(completions(runs), base_jobs).values()))
            out.append({"family": family, "workload": index, "value": v,
                        "policies": {"default": base, "progress": mine}})
    finally:
        setattr(owner, name, shipped)
    return out


def parse_values(ap: argparse.ArgumentParser, text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ap.error(f"VALUES: not a comma-separated list of numbers: {text!r}")
    if not values or not all(math.isfinite(v) for v in values):
        ap.error(f"VALUES: give at least one finite number: {text!r}")
    return list(dict.fromkeys(values))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("constant", help=f"one of {', '.join(SWEEPABLE)} "
                    "(specon.core.progress, specon.core.placement)")
    ap.add_argument("values", help="comma-separated values to try, e.g. 0.5,1,2")
    add_set_args(ap, "widened", 12)
    add_view_args(ap)
    ap.add_argument("--out", type=Path, default=None, help="every number, as JSON")
    a = ap.parse_args()
    known = constants()
    if a.constant not in known:
        ap.error(f"constant: {a.constant!r} is not one this sweep can set "
                 f"(known: {', '.join(SWEEPABLE)})")
    values = parse_values(ap, a.values)
    if isinstance(known[a.constant], int) and not all(v.is_integer() for v in values):
        ap.error(f"VALUES: {a.constant} is a count; give whole numbers: {a.values!r}")
    families = set_families(ap, a)
    cfg = view_config(ap, a)
    started = time.time()
    work = [(f, i, list(range(a.seeds)), cfg, a.constant, values)
            for f in families for i in range(a.first, a.first + a.workloads)]
    rows = [r for part in run_all(one_workload, work, a.processes) for r in part]
    table = []
    for v in values:
        entry = summarise([r for r in rows if r["value"] == v], ["default", "progress"])[0]
        entry["policy"] = f"{a.constant} {v:g}" + (" (shipped)" if v == known[a.constant]
                                                   else "")
        table.append(entry)
    if cfg:
        print(f"config (noise {a.noise}): " + ", ".join(f"{k} {v:g}" for k, v in cfg.items())
              + "\n")
    print(markdown(table))
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"command": " ".join(sys.argv[1:]), "config": cfg,
                                     "table": table, "workloads": rows}, indent=1))
    print(f"\n{len(work)} workloads x {a.seeds} seeds x {len(values)} values in "
          f"{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
