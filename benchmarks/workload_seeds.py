"""One workload of the random suite, seed by seed: does a policy's loss against default repeat?

The suite (benchmarks/suite.py) compares means over 3 simulator seeds, and default's own
placement ties, falling otherwise, move a workload's makespan by up to 71% (its `--redrawn`
row). Before a rule is changed for one workload's miss, this says whether the miss is the
rule's or the draw's: per seed the change of the policy's average completion, makespan and
time to 90% against default's on the same seed, in how many seeds it is worse, both
schedulers' ranges, and the change of the means over the first 3 seeds (the suite's figure)
and over all of them.

    python benchmarks/workload_seeds.py bursty 19 --seeds 10 --manager-view --unlabelled \\
        --noise standard
        # the widened suite's bursty workload 19 (generator seed 5019) as installed

The workload is `specon.sim.generate.family_workload(FAMILY, INDEX)`: the suite's `--first
12 --workloads 30` runs indices 12-41 of each family. The view arguments are the suite's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from suite import add_view_args, completions, pct, slowdowns, view_config  # noqa: E402

from specon.core.policy import POLICIES, canonical  # noqa: E402
from specon.sim.generate import FAMILIES, family_workload  # noqa: E402
from specon.sim.model import SimConfig  # noqa: E402
from specon.sim.runner import run_one  # noqa: E402

METRICS = (("avg_completion_s", "average completion"), ("makespan_s", "makespan"),
           ("avg_time_to_90_s", "time to 90%"))
#: The suite's number of seeds, whose means it compares.
SUITE_SEEDS = 3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("family", help=f"one of {', '.join(FAMILIES)}")
    ap.add_argument("index", type=int, help="the workload's index in its family (0 and up)")
    ap.add_argument("--seeds", type=int, default=10, help="simulator seeds (0 .. N-1)")
    ap.add_argument("--policy", default="progress", help="the policy set against default")
    add_view_args(ap)
    a = ap.parse_args()
    if a.family not in FAMILIES:
        ap.error(f"unknown family {a.family!r} (known: {', '.join(FAMILIES)})")
    if a.index < 0 or a.seeds < 1:
        ap.error("the index must be 0 or more and --seeds at least 1")
    policy = canonical(a.policy)
    if policy not in POLICIES or policy in ("default", "oracle"):
        ap.error(f"--policy: {a.policy!r} is not a policy to set against default "
                 f"(known: {', '.join(p for p in POLICIES if p not in ('default', 'oracle'))})")
    cfg = SimConfig(record_timeline=False, **view_config(ap, a))
    wl = family_workload(a.family, a.index)
    print(f"{wl.description}; {a.seeds} seeds, {policy} against default")
    runs = {p: [run_one(wl, p, cfg, seed) for seed in range(a.seeds)]
            for p in ("default", policy)}
    summaries = {p: [r.summary() for r in rs] for p, rs in runs.items()}
    for key, label in METRICS:
        base = [float(s[key]) for s in summaries["default"]]
        mine = [float(s[key]) for s in summaries[policy]]
        per_seed = [pct(m, b) for m, b in zip(mine, base, strict=True)]
        k = min(SUITE_SEEDS, a.seeds)
        first = pct(statistics.fmean(mine[:k]), statistics.fmean(base[:k]))
        every = pct(statistics.fmean(mine), statistics.fmean(base))
        print(f"{label}: means of seeds 0-{k - 1} {first:+.1f}%, of all {a.seeds} {every:+.1f}%; "
              f"per seed {min(per_seed):+.1f}% .. {max(per_seed):+.1f}%, worse in "
              f"{sum(c > 0 for c in per_seed)} of {a.seeds}; default {min(base):.0f}-"
              f"{max(base):.0f} s, {policy} {min(mine):.0f}-{max(mine):.0f} s")
    slow = slowdowns(completions(runs[policy]), completions(runs["default"]))
    worst = max(slow, key=lambda n: slow[n])
    print(f"worst job over all {a.seeds} seeds' means: {worst}, {slow[worst]:.2f}x its default "
          "time")


if __name__ == "__main__":
    main()
