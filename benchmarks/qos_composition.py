"""What the agent's QoS rule does beside the shipped node rule: on the two resource-short
built-in experiments, ``progress`` as the simulator publishes it (the node rule's shares
alone) against ``progress`` with the agent's QoS limits over those shares, as the agent
composes them (``SimConfig.qos_over_shares``, specon.core.node.NodeController.limits), and
``agent-qos`` (the QoS rule over equal shares), each beside ``default`` in the same run.

Per policy: targets or deadlines met, average completion against default's, and the worst
job's completion over its completion under default (the worst over all seeds).

Usage: python benchmarks/qos_composition.py [--seeds 10]
"""

from __future__ import annotations

import argparse
import statistics

from specon.sim.experiments import EXPERIMENTS
from specon.sim.model import SimConfig
from specon.sim.runner import run_one

CASES = (("targets-short", "targets_met", 60), ("deadlines-short", "deadlines_met", 40))
ARMS = (("progress", "progress", False), ("progress + QoS limits", "progress", True),
        ("agent-qos", "agent-qos", False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    args = ap.parse_args()
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    print("| experiment | arm | met | avg completion vs default | worst job |")
    print("|---|---|---|---|---|")
    for experiment, metric, of in CASES:
        build = EXPERIMENTS[experiment].build
        base = [run_one(build(s), "default", SimConfig(record_timeline=False), s)
                for s in range(args.seeds)]
        met = statistics.fmean(float(r.summary()[metric]) for r in base)
        avg_base = statistics.fmean(float(r.summary()["avg_completion_s"]) for r in base)
        base_jobs = [{j.name: j.completion_s for j in r.jobs} for r in base]  # per seed
        print(f"| {experiment} | default | {met:.1f} of {of} | | |")
        for arm, policy, over in ARMS:
            cfg = SimConfig(record_timeline=False, qos_over_shares=over)
            runs = [run_one(build(s), policy, cfg, s) for s in range(args.seeds)]
            met = statistics.fmean(float(r.summary()[metric]) for r in runs)
            avg = statistics.fmean(float(r.summary()["avg_completion_s"]) for r in runs)
            worst = max(j.completion_s / d[j.name]
                        for r, d in zip(runs, base_jobs, strict=True) for j in r.jobs)
            print(f"| {experiment} | {arm} | {met:.1f} of {of} | "
                  f"{100 * (avg / avg_base - 1):+.1f}% | {worst:.2f}× |")


if __name__ == "__main__":
    main()
