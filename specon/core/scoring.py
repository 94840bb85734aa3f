"""SpeCon Algorithm 4: worker scores and the choice of a host.

S = |PC|*w_pc + |WC|*w_wc + |CC|*w_cc, divided by the worker's capacity (CPUs x per-core
speed; 1 when unknown, which is the research's homogeneous case): a worker with twice the
CPUs takes twice the jobs. The candidates are the workers with the minimum score, ties broken
by current CPU load (then by name, so that a decision is reproducible). A worker
whose state is unknown (stale heartbeat) or that cannot fit the job is never a candidate:
unknown is not idle.

For a running job the comparison is made *without the job itself* (it is taken off its host
before scoring), so that the host and the others are judged on equal terms; the reported scores
are the raw ones, as in the research's worked example.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from specon.core.categorize import Category


@dataclass(frozen=True, slots=True)
class Weights:
    progressing: float = 2.0
    watching: float = 1.5
    converged: float = 1.0

    def __post_init__(self) -> None:
        if not self.progressing > self.watching > self.converged >= 0:
            raise ValueError("weights must satisfy w_pc > w_wc > w_cc >= 0")

    def of(self, category: Category) -> float:
        if category is Category.PROGRESSING:
            return self.progressing
        if category is Category.WATCHING:
            return self.watching
        return self.converged


@dataclass(frozen=True, slots=True)
class WorkerView:
    """What the manager knows of one worker."""

    name: str
    progressing: int = 0
    watching: int = 0
    converged: int = 0
    load: float = 0.0  # CPU in use, as a fraction of the worker
    available: bool = True  # False: stale, cordoned, or cannot fit the job
    capacity: float = 1.0  # CPUs x per-core speed, in any unit shared by all workers

    def __post_init__(self) -> None:
        if not self.capacity > 0:
            raise ValueError(f"worker {self.name!r}: capacity must be > 0")

    def score(self, weights: Weights) -> float:
        return (
            self.progressing * weights.progressing
            + self.watching * weights.watching
            + self.converged * weights.converged
        ) / self.capacity

    def without(self, category: Category) -> WorkerView:
        pc, wc, cc = self.progressing, self.watching, self.converged
        if category is Category.PROGRESSING:
            pc = max(0, pc - 1)
        elif category is Category.WATCHING:
            wc = max(0, wc - 1)
        else:
            cc = max(0, cc - 1)
        return WorkerView(self.name, pc, wc, cc, self.load, self.available, self.capacity)


@dataclass(frozen=True, slots=True)
class Placement:
    """The decision: ``target`` is None when no worker is a candidate."""

    target: str | None
    stay: bool
    scores: Mapping[str, float]
    candidates: tuple[str, ...]


def choose_host(
    workers: Sequence[WorkerView],
    weights: Weights = Weights(),
    current_host: str | None = None,
    category: Category = Category.CONVERGED,
) -> Placement:
    """Algorithm 4. ``current_host`` None places a new job; otherwise it is a reallocation.

    ``category`` is the job's current category (it is counted on its host).
    """
    scores = {w.name: w.score(weights) for w in workers}
    judged = [w.without(category) if w.name == current_host else w for w in workers]
    eligible = [w for w in judged if w.available or w.name == current_host]
    if not eligible:
        return Placement(target=None, stay=False, scores=scores, candidates=())
    best = min(w.score(weights) for w in eligible)
    cands = [w for w in eligible if w.score(weights) <= best + 1e-9]
    names = tuple(sorted(w.name for w in cands))
    if current_host is not None and current_host in names:
        return Placement(target=current_host, stay=True, scores=scores, candidates=names)
    chosen = min(cands, key=lambda w: (w.load, w.name))
    return Placement(target=chosen.name, stay=False, scores=scores, candidates=names)


def placement_scores(
    workers: Sequence[WorkerView], weights: Weights = Weights(), max_score: int = 10
) -> Mapping[str, int]:
    """Extender priorities 0..max_score: the lowest SpeCon score gets max_score (the rule is
    :func:`placement_priorities`'s). Unavailable (unknown, stale) workers get 0."""
    scores = placement_priorities(
        np.array([w.score(weights) for w in workers], dtype=np.float64),
        np.array([w.load for w in workers], dtype=np.float64),
        np.array([w.available for w in workers], dtype=bool), max_score)
    return dict(zip((w.name for w in workers), scores.tolist(), strict=True))


def placement_priorities(
    score: npt.NDArray[np.float64], load: npt.NDArray[np.float64],
    available: npt.NDArray[np.bool_], max_score: int = 10,
) -> npt.NDArray[np.int64]:
    """Extender priorities 0..max_score, positionally, from each worker's SpeCon score, CPU
    load (fraction) and availability; unavailable workers get 0.

    The lowest score gets max_score. Load breaks ties: it is added to the SpeCon score scaled
    below half the smallest gap between two distinct scores, so it never reorders different
    scores; the result is mapped linearly onto 1..max_score (0 is kept for unknown workers).
    Arrays, because the extender calls this with thousands of nodes per scheduled pod.
    """
    out = np.zeros(len(score), dtype=np.int64)
    if not available.any():
        return out
    s = score[available]
    raw = np.unique(s)
    gaps = np.diff(raw)
    gaps = gaps[gaps > 1e-12]
    eps = 0.5 * float(gaps.min()) if gaps.size else 1.0
    value = s + eps * np.clip(load[available], 0.0, 1.0)
    lo, hi = float(value.min()), float(value.max())
    if hi - lo < 1e-12:
        out[available] = max_score
    else:  # np.round rounds half to even, as Python's round
        out[available] = 1 + np.round((max_score - 1) * ((hi - value) / (hi - lo))).astype(
            np.int64)
    return out


@dataclass(frozen=True, slots=True)
class Reallocation:
    """Algorithm 4's answer to one reallocation request, as the simulator and the manager act
    on it. ``migrated``: the job is marked migrated (moved, or judged best where it is) and is
    never asked about again; ``target`` is where it goes (``decision`` "migrate")."""

    decision: Literal["migrate", "stay", "wait"]  # wait: no candidate now, ask again later
    target: str | None
    migrated: bool
    reason: str
    scores: Mapping[str, float]


def decide_reallocation(
    workers: Sequence[WorkerView],
    weights: Weights,
    current_host: str,
    category: Category = Category.CONVERGED,
    movable: bool = True,
) -> Reallocation:
    """Algorithm 4 for a converged job whose worker asked to move it.

    A job that cannot be moved (it does not checkpoint, or its owner cannot be relied on) is
    judged best where it is: marked migrated like a job that stays, so that it counts as
    converged for Algorithm 5 and its worker stops asking. With no candidate at all the job
    waits, unmarked, and may be asked about again.
    """
    if not movable:
        return Reallocation("stay", current_host, True, "the job cannot be moved", {})
    choice = choose_host(workers, weights, current_host=current_host, category=category)
    if choice.stay:
        return Reallocation("stay", current_host, True, "the current node is among the best",
                            choice.scores)
    if choice.target is None:
        return Reallocation("wait", None, False, "no known node can take the job",
                            choice.scores)
    return Reallocation("migrate", choice.target, True, "", choice.scores)


#: A job on its way to a worker (a reserved migration target) is counted there in this category.
INCOMING = Category.CONVERGED


def worker_view(
    name: str,
    categories: Mapping[Category, int],
    incoming: int = 0,
    load: float = 0.0,
    available: bool = True,
    capacity: float = 1.0,
) -> WorkerView:
    """A worker's view from its jobs' category counts (the simulator's and the manager's);
    ``incoming`` jobs on their way to the worker count as :data:`INCOMING`."""
    counts = {cat: categories.get(cat, 0) for cat in Category}
    counts[INCOMING] += incoming
    return WorkerView(name, counts[Category.PROGRESSING], counts[Category.WATCHING],
                      counts[Category.CONVERGED], load, available, capacity)
