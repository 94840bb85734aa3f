"""Simulator speed: the 50-job experiment with every policy, and 10,000 jobs on 500 workers.

Usage: python benchmarks/sim_speed.py [--repeats 3] [--big-jobs 10000] [--big-workers 500]
Prints wall time per run (median and spread over repeats) and simulated events per second.
Wall times depend on this machine's load; the ratio column compares each policy with
`default` in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import time

from specon.core.policy import POLICIES, canonical
from specon.sim.experiments import EXPERIMENTS, scale_test
from specon.sim.model import SimConfig
from specon.sim.runner import run_one


def timed(fn):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--big-jobs", type=int, default=10_000)
    ap.add_argument("--big-workers", type=int, default=500)
    ap.add_argument("--big-policies", default="default,progress,oracle")
    args = ap.parse_args()
    cfg = SimConfig(record_timeline=False)

    wl = EXPERIMENTS["paper-50x8"].build(0)
    print(f"# 50 jobs on 8 workers, every policy, {args.repeats} repeats")
    print(f"{'policy':16} {'median s':>9} {'min s':>7} {'max s':>7} {'events':>8} "
          f"{'events/s':>9} {'vs default':>10}")
    base = None
    for p in POLICIES:
        times, ev = [], 0
        for _ in range(args.repeats):
            dt, res = timed(lambda p=p: run_one(wl, p, cfg, 0))
            times.append(dt)
            ev = res.events
        med = statistics.median(times)
        base = base or med
        print(f"{p:16} {med:9.3f} {min(times):7.3f} {max(times):7.3f} {ev:8d} "
              f"{ev / med:9.0f} {med / base:9.2f}x")

    print(f"\n# {args.big_jobs} jobs on {args.big_workers} workers, one repeat each")
    t_build, big = timed(lambda: scale_test(0, args.big_jobs, args.big_workers))
    print(f"building the workload: {t_build:.2f} s")
    print(f"{'policy':16} {'wall s':>9} {'events':>9} {'events/s':>9} {'makespan s':>11}")
    for p in (canonical(p) for p in args.big_policies.split(",")):
        dt, res = timed(lambda p=p: run_one(big, p, cfg, 0))
        s = res.summary()
        print(f"{p:16} {dt:9.2f} {res.events:9d} {res.events / dt:9.0f} "
              f"{s['makespan_s']:11.0f}")


if __name__ == "__main__":
    main()
