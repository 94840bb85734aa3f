"""Step 2 of the parameter choice (docs/parameters.md): the sweep's best candidates on every
built-in experiment of the research's kind, 10 seeds each, scored by the mean over experiments
of (average-completion change + makespan change) against `default`.

Usage: python benchmarks/parameter_robustness.py
"""

from __future__ import annotations

from specon.sim.experiments import EXPERIMENTS
from specon.sim.model import SimConfig
from specon.sim.runner import run_matrix

CANDIDATES = [(0.02, 1.0, 120.0), (0.01, 1.0, 120.0), (0.0025, 1.0, 60.0), (0.05, 1.0, 120.0),
              (0.01, 1.5, 120.0)]
EXPERIMENT_NAMES = ["paper-30", "paper-20", "paper-vae20", "paper-50x8", "philly-160"]


def main() -> None:
    seeds = range(10)
    quiet = SimConfig(record_timeline=False)
    base = {e: run_matrix(e, EXPERIMENTS[e].build, ["default"], seeds, quiet)
            for e in EXPERIMENT_NAMES}
    print("| alpha | beta | interval | mean score | " + " | ".join(EXPERIMENT_NAMES) + " |")
    print("|---" * (4 + len(EXPERIMENT_NAMES)) + "|")
    for alpha, beta, interval in CANDIDATES:
        cfg = SimConfig(record_timeline=False, alpha=alpha, flowcon_beta=beta,
                        interval_s=interval)
        total, cells = 0.0, []
        for e in EXPERIMENT_NAMES:
            mx = run_matrix(e, EXPERIMENTS[e].build, ["paper"], seeds, cfg)
            mx.runs["default"] = base[e].runs["default"]
            avg = mx.vs_default("paper", "avg_completion_s").mean
            mk = mx.vs_default("paper", "makespan_s").mean
            total += avg + mk
            cells.append(f"{avg:+.1f}% / {mk:+.1f}%")
        print(f"| {alpha:g} | {beta:g} | {interval:g} s | {total / len(EXPERIMENT_NAMES):+.2f} | "
              + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
