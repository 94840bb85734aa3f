"""SpeCon Algorithm 4: worker scores and the choice of a host.

S = |PC|*w_pc + |WC|*w_wc + |CC|*w_cc; the candidates are the workers with the minimum score,
ties broken by current CPU load (then by name, so that a decision is reproducible). A worker
whose state is unknown (stale heartbeat) or that cannot fit the job is never a candidate:
unknown is not idle.

For a running job the comparison is made *without the job itself* (it is taken off its host
before scoring), so that the host and the others are judged on equal terms; the reported scores
are the raw ones, as in the research's worked example.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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

    def score(self, weights: Weights) -> float:
        return (
            self.progressing * weights.progressing
            + self.watching * weights.watching
            + self.converged * weights.converged
        )

    def without(self, category: Category) -> WorkerView:
        pc, wc, cc = self.progressing, self.watching, self.converged
        if category is Category.PROGRESSING:
            pc = max(0, pc - 1)
        elif category is Category.WATCHING:
            wc = max(0, wc - 1)
        else:
            cc = max(0, cc - 1)
        return WorkerView(self.name, pc, wc, cc, self.load, self.available)


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
    values = [(w.score(weights), min(1.0, max(0.0, w.load))) if w.available else None
              for w in workers]
    return dict(zip((w.name for w in workers), placement_priorities(values, max_score),
                    strict=True))


def placement_priorities(
    values: Sequence[tuple[float, float] | None], max_score: int = 10
) -> list[int]:
    """Extender priorities 0..max_score, positionally: ``values[i]`` is a worker's (SpeCon
    score, load in 0..1), None for an unavailable one (it gets 0).

    The lowest score gets max_score. Load breaks ties: it is added to the SpeCon score scaled
    below half the smallest gap between two distinct scores, so it never reorders different
    scores; the result is mapped linearly onto 1..max_score (0 is kept for unknown workers).
    Written for the extender's hot path: plain comprehensions over lists, no objects made per
    worker.
    """
    avail = [v for v in values if v is not None]
    if not avail:
        return [0] * len(values)
    raw = sorted({s for s, _ in avail})
    gaps = [b - a for a, b in itertools.pairwise(raw) if b - a > 1e-12]
    eps = 0.5 * min(gaps) if gaps else 1.0
    value = [None if v is None else v[0] + eps * v[1] for v in values]
    present = [v for v in value if v is not None]
    lo, hi = min(present), max(present)
    span = hi - lo
    k = max_score - 1
    if span < 1e-12:
        return [0 if v is None else max_score for v in value]
    return [0 if v is None else 1 + round(k * ((hi - v) / span)) for v in value]


def views_from_categories(
    hosts: Mapping[str, str],
    categories: Mapping[str, Category],
    loads: Mapping[str, float],
    workers: Sequence[str],
    unavailable: frozenset[str] = frozenset(),
) -> list[WorkerView]:
    """Build worker views from job -> host and job -> category maps."""
    tally: dict[str, list[int]] = {w: [0, 0, 0] for w in workers}
    for job, host in hosts.items():
        if host not in tally:
            continue
        cat = categories.get(job, Category.PROGRESSING)
        idx = 0 if cat is Category.PROGRESSING else 1 if cat is Category.WATCHING else 2
        tally[host][idx] += 1
    return [
        WorkerView(w, t[0], t[1], t[2], loads.get(w, 0.0), w not in unavailable)
        for w, t in tally.items()
    ]
