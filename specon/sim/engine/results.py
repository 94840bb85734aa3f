"""What a run leaves behind (specon.sim.model.RunResult): each worker's CPU in use and number
of jobs as step functions, each job's share of its worker when the timeline is recorded."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from specon.sim.model import JobResult, RunResult

V = TypeVar("V", float, int)


def step(series: list[tuple[float, V]], t: float, value: V) -> None:
    """Add a point to a step function: replace one at the same time, skip one that changes
    nothing."""
    if series and series[-1][0] == t:
        series[-1] = (t, value)
    elif not series or series[-1][1] != value:
        series.append((t, value))


class Recorder:
    def __init__(self, policy: str, seed: int | None, workers: Iterable[str],
                 timeline: bool) -> None:
        self.result = RunResult(policy=policy, seed=seed, jobs=[])
        self.timeline = timeline
        for name in workers:
            self.result.cpu[name] = [(0.0, 0.0)]
            self.result.counts[name] = [(0.0, 0)]

    def cpu(self, t: float, worker: str, cores: float) -> None:
        step(self.result.cpu[worker], t, cores)

    def cpu_in_use(self, worker: str) -> float:
        return self.result.cpu[worker][-1][1]

    def count(self, t: float, worker: str, jobs: int) -> None:
        step(self.result.counts[worker], t, jobs)

    def share(self, t: float, job: str, worker: str, cores: float) -> None:
        """The job's cores on ``worker`` from ``t`` ("" and 0: on none)."""
        if self.timeline:
            self.result.shares.setdefault(job, []).append((t, worker, cores))

    def close(self, jobs: Iterable[JobResult], events: int) -> RunResult:
        self.result.jobs = list(jobs)
        self.result.events = events
        return self.result
