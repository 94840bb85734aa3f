"""Which parts of the shipped policy pay: each variant over the random suite, against default.

Variants of `progress` (specon/core/policy.py): without thread hints, with Kubernetes'
spread placement instead of its own, without moves, with the floor raised to a share of an
equal split for progressing jobs, and with a higher bar for moves. Per variant: mean, median
and worst change in average completion against default, over the workloads of
specon.sim.generate (seed means), and how many workloads it lost.

    python benchmarks/ablation.py [--workloads 30] [--seeds 2]
    python benchmarks/ablation.py --cost-error 0.3 --unknown-total-share 0.3   # what it knows
"""

from __future__ import annotations

import argparse
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specon.core.policy import POLICIES, Policy  # noqa: E402
from specon.sim.engine import Simulator  # noqa: E402
from specon.sim.generate import random_workload  # noqa: E402
from specon.sim.model import SimConfig  # noqa: E402

SHIPPED = POLICIES["progress"]
VARIANTS: dict[str, tuple[Policy, dict[str, float]]] = {
    "shipped": (SHIPPED, {}),
    "no thread hints": (replace(SHIPPED, thread_hint=False), {}),
    "spread placement": (replace(SHIPPED, placement="spread"), {}),
    "no moves": (replace(SHIPPED, moves="none"), {}),
    "spread placement, no moves": (replace(SHIPPED, placement="spread", moves="none"), {}),
    "progressing jobs keep 1/4 of an equal split": (SHIPPED, {"fair_share": 0.25}),
    "moves must gain 3x their cost": (SHIPPED, {"move_margin": 3.0}),
}


COST_ERROR = 0.0
UNKNOWN_TOTAL = 0.0


def one(args: tuple[int, int, float, float]) -> dict[str, float]:
    global COST_ERROR, UNKNOWN_TOTAL
    index, seeds, COST_ERROR, UNKNOWN_TOTAL = args
    wl = random_workload(index)
    base_cfg = SimConfig(record_timeline=False, cost_error=COST_ERROR,
                         unknown_total_share=UNKNOWN_TOTAL)

    def avg(policy: Policy, cfg: SimConfig) -> float:
        return statistics.fmean(float(Simulator(wl, policy, cfg, s).run().summary()
                                      ["avg_completion_s"]) for s in range(seeds))

    base = avg(POLICIES["default"], base_cfg)
    return {name: 100.0 * (avg(p, replace(base_cfg, **kw)) - base) / base
            for name, (p, kw) in VARIANTS.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--cost-error", type=float, default=0.0,
                    help="relative error of each job's measured step cost")
    ap.add_argument("--unknown-total-share", type=float, default=0.0,
                    help="share of jobs that declare no total steps")
    a = ap.parse_args()
    if min(a.workloads, a.seeds, a.processes) < 1:
        ap.error("--workloads, --seeds and --processes must be at least 1")
    with ProcessPoolExecutor(a.processes) as pool:
        rows = list(pool.map(one, [(i, a.seeds, a.cost_error, a.unknown_total_share)
                                   for i in range(a.workloads)]))
    print("| variant | mean | median | worst | workloads lost |")
    print("|---|---|---|---|---|")
    for name in VARIANTS:
        v = [r[name] for r in rows]
        print(f"| {name} | {statistics.fmean(v):+.1f}% | {statistics.median(v):+.1f}% | "
              f"{max(v):+.1f}% | {sum(1 for x in v if x > 1.0)} |")
    print(f"\n{a.workloads} suite workloads x {a.seeds} seeds, change in average completion "
          f"against default (cost error {a.cost_error:g}, unknown totals "
          f"{a.unknown_total_share:g})")


if __name__ == "__main__":
    main()
