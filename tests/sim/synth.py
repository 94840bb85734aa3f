"""Small synthetic profiles and workloads for simulator tests (not shipped as measurements)."""

from __future__ import annotations

import math
import random
from typing import Any

from specon.workload import Workload
from specon.workload.load import parse_workload


def profile(
    name: str,
    iterations: int = 600,
    tau: float = 0.15,
    noise: float = 0.01,
    cpi: float = 0.1,
    seed: int = 1,
    speedup: dict[str, float] | None = None,
) -> dict[str, Any]:
    rng = random.Random(seed)
    n = 200
    loss = [
        2.0 * math.exp(-(k / n) / tau) + 0.1 + rng.gauss(0, noise) for k in range(n)
    ]
    return {
        "name": name,
        "iterations": iterations,
        "loss": loss,
        "cpu_seconds_per_iteration": cpi,
        "speedup": speedup or {"1": 1.0, "2": 1.8},
        "checkpoint_seconds": 0.5,
        "restore_seconds": 0.5,
        "checkpoint_bytes": 1000,
    }


def workload(jobs: int = 12, workers: int = 2, cpus: float = 2.0, spacing: float = 20.0,
             **extra: Any) -> Workload:
    data = {
        "format": "specon-workload/v1",
        "cluster": {"workers": [{"name": f"w{i + 1}", "cpus": cpus} for i in range(workers)]},
        "profiles": {
            "fast": profile("fast", tau=0.08),
            "slow": profile("slow", tau=0.4, iterations=900, seed=2),
        },
        "jobs": [
            {"name": f"job-{i + 1}", "profile": "fast" if i % 2 else "slow",
             "submit_s": i * spacing, **extra}
            for i in range(jobs)
        ],
    }
    from pathlib import Path

    return parse_workload(data, Path("synthetic.json"))
