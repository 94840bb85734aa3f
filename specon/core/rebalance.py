"""SpeCon Algorithm 5: spread converged jobs onto idle or under-loaded workers near the end.

Runs only when every job is converged (marked migrated). A job's converged duration
d = now - the time it was marked migrated stands in for its unknown remaining time: the job
converged most recently (smallest d) is the one moved.

Balance factor bf = floor(active jobs / workers). The research's rule gives bf = 0 when there
are fewer jobs than workers, which would never fill an idle worker; we floor bf at
``min_balance`` (default 1) so that such a cluster is still spread (docs/algorithms.md).
A job is rebalanced at most once, is never moved onto its own host, and a source worker is
never emptied below bf. With ``slack`` (jobs with a deadline: seconds to spare) the candidate
with the most slack is moved first, then as above; a job without one has infinite slack.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PlacedJob:
    name: str
    worker: str
    migrated_at: float | None  # None: not yet converged/marked migrated
    rebalanced: bool = False
    movable: bool = True  # False: cannot be checkpointed, or already moving


@dataclass(frozen=True, slots=True)
class Move:
    job: str
    source: str
    target: str


def _marked(job: PlacedJob, now: float) -> float:
    return now if job.migrated_at is None else job.migrated_at


def balance_factor(n_jobs: int, n_workers: int, min_balance: int = 1) -> int:
    if n_workers <= 0:
        return 0
    return max(min_balance, n_jobs // n_workers)


def plan_rebalance(
    jobs: Sequence[PlacedJob],
    workers: Sequence[str],
    now: float,
    min_balance: int = 1,
    slack: Mapping[str, float] | None = None,
) -> tuple[Move, ...]:
    """Moves for one rebalancing round (empty unless every job is marked migrated)."""
    spare = slack or {}
    if not jobs or not workers or any(j.migrated_at is None for j in jobs):
        return ()
    known = set(workers)
    load = {w: 0 for w in workers}
    for j in jobs:
        if j.worker in load:
            load[j.worker] += 1
    bf = balance_factor(sum(load.values()), len(workers), min_balance)
    idle = [w for w in workers if load[w] == 0]
    if idle:
        targets = [w for w in idle if load[w] < bf]
    else:
        targets = [w for w in workers if load[w] < bf - 1]
    moved: set[str] = set()
    moves: list[Move] = []
    for target in sorted(targets, key=lambda w: (load[w], w)):
        pool = [
            j
            for j in jobs
            if j.worker in known
            and j.worker != target
            and j.movable
            and not j.rebalanced
            and j.name not in moved
            and load[j.worker] > bf
        ]
        if not pool:
            continue
        pick = min(pool, key=lambda j: (-spare.get(j.name, math.inf), now - _marked(j, now),
                                        j.name))
        moves.append(Move(job=pick.name, source=pick.worker, target=target))
        moved.add(pick.name)
        load[pick.worker] -= 1
        load[target] += 1
    return tuple(moves)
