"""The QoS floor (specon/defaults.py QOS_FLOOR_CORES): targets and deadlines met by the agent's
rule (simulator policy ``agent-qos``) for several floors, on the two resource-short built-in
experiments, beside ``default`` in the same run.

Usage: python benchmarks/qos_floor.py [--seeds 10] [--floors 0.02,0.05,0.1,0.25]
"""

from __future__ import annotations

import argparse
import statistics

from specon.sim.experiments import EXPERIMENTS
from specon.sim.model import SimConfig
from specon.sim.runner import run_one

CASES = (("targets-short", "targets_met", 60), ("deadlines-short", "deadlines_met", 40))


def met(experiment: str, metric: str, policy: str, seeds: int, floor: float) -> list[float]:
    cfg = SimConfig(record_timeline=False, qos_floor_cores=floor)
    exp = EXPERIMENTS[experiment]
    return [float(run_one(exp.build(s), policy, cfg, s).summary()[metric]) for s in range(seeds)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--floors", default="0.02,0.05,0.1,0.25")
    args = ap.parse_args()
    floors = [float(f) for f in args.floors.split(",")]
    print(f"{'floor (cores)':>14} " + " ".join(f"{e:>18}" for e, _, _ in CASES))
    base = [statistics.mean(met(e, m, "default", args.seeds, 0.05)) for e, m, _ in CASES]
    print(f"{'default':>14} " + " ".join(f"{b:>12.1f} / {n:<3}" for b, (_, _, n)
                                         in zip(base, CASES, strict=True)))
    for f in floors:
        vals = [statistics.mean(met(e, m, "agent-qos", args.seeds, f)) for e, m, _ in CASES]
        print(f"{f:>14g} " + " ".join(f"{v:>12.1f} / {n:<3}" for v, (_, _, n)
                                      in zip(vals, CASES, strict=True)))


if __name__ == "__main__":
    main()
