"""SpeCon Algorithm 3: progressing / watching / converged categories per worker.

Each interval a job's growth G(t_m) (normalised progress, see :mod:`specon.core.growth`) is
compared with the threshold alpha and with its previous growth:

* G fell and G < alpha: PC -> WC, WC -> CC; a job already in CC stays and, if the worker still
  hosts more than one progressing or watching job, a reallocation request is raised at once.
* G did not fall and G < alpha: the job stays where it is (a noisy loss is not a trend).
* G >= alpha: back to PC.
* No valid loss: a job whose last ``NO_VALID_LOSS_INTERVALS`` intervals logged losses but no
  finite one (a NaN or inf loss, a diverged run) has no growth to judge, yet it is not
  progressing: PC -> WC (WC and CC stay), and its last growth is forgotten. A finite loss
  again is judged as above.
* Slow interval: a job that logged at under ``SLOW_PACE`` of its top pace (loss lines per
  second, :attr:`specon.core.growth.Growth.pace`) was held back (a CPU floor, a crowded node),
  and its growth per minute says so, not that its loss flattened. Such an interval does not
  demote it: the job keeps its category and its last growth. It can still promote it (G >=
  alpha at a fraction of its pace is progress). At most ``SLOW_PACE_INTERVALS`` in a row are
  skipped; the next slow one is judged, the slow pace becomes the job's top pace and its last
  growth (taken at the other pace) is forgotten, so it is compared like with like from then on.
  The growth is not scaled by the pace: at a twentieth of the steps the loss change is mostly
  noise, and scaling it 20x would make noise decide the category.
* Cut interval: an interval over which the job's CPU limit fell under ``SLOW_PACE`` of its
  limit when the interval began is a slow interval too, whatever its pace: its losses were
  logged partly at the old limit and partly at the new one (the pace of such a mix can pass
  for a full one, while the growth per minute already shows the cut).

A migrated job (moved, or judged best where it is) is never categorised or requested again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from specon.defaults import NO_VALID_LOSS_INTERVALS, SLOW_PACE, SLOW_PACE_INTERVALS


class Category(StrEnum):
    PROGRESSING = "PC"
    WATCHING = "WC"
    CONVERGED = "CC"


@dataclass(frozen=True, slots=True)
class JobState:
    category: Category = Category.PROGRESSING
    last_growth: float | None = None
    migrated: bool = False
    #: The highest pace (loss lines per second) of the job's intervals on this node.
    top_pace: float | None = None
    #: Slow intervals in a row not judged (see the module's "Slow interval").
    slow: int = 0
    #: The job's CPU limit (a fraction of the node) when its current interval began; None:
    #: not known (see the module's "Cut interval").
    limit: float | None = None


@dataclass(frozen=True, slots=True)
class CategorizeResult:
    states: Mapping[str, JobState]
    #: Jobs for which the worker asks the manager for a new host, in a stable order.
    reallocation_requests: tuple[str, ...]


def _next(state: JobState, g: float, alpha: float) -> Category:
    if g >= alpha:
        return Category.PROGRESSING
    fell = state.last_growth is not None and g < state.last_growth
    if not fell:
        return state.category
    if state.category is Category.PROGRESSING:
        return Category.WATCHING
    return Category.CONVERGED


def _judge(state: JobState, g: float, alpha: float, pace: float | None,
           slow_after: int, cut: bool = False) -> JobState:
    """The job's state after an interval of growth ``g`` at ``pace`` (None: unknown);
    ``cut``: its limit was cut over the interval."""
    known = pace is not None and pace > 0
    top = state.top_pace
    if known and top is not None and pace is not None:
        cut = cut or pace < SLOW_PACE * top
    if not cut or g >= alpha:
        if not known:
            return replace(state, category=_next(state, g, alpha), last_growth=g, slow=0)
        return replace(state, category=_next(state, g, alpha), last_growth=g, slow=0,
                       top_pace=max(pace or 0.0, top or 0.0))
    if state.slow < slow_after:
        return replace(state, slow=state.slow + 1)
    # held back for long: this is its pace now; its last growth was taken at another
    rebased = replace(state, last_growth=None)
    return replace(rebased, category=_next(rebased, g, alpha), last_growth=g, slow=0,
                   top_pace=pace if known else top)


def _no_valid_loss(state: JobState) -> JobState:
    """A job with no finite loss for long enough: not progressing (WC and CC stay), and its
    last growth, which no longer describes it, forgotten."""
    category = (Category.WATCHING if state.category is Category.PROGRESSING
                else state.category)
    return replace(state, category=category, last_growth=None)


def categorize(
    states: Mapping[str, JobState], growth: Mapping[str, float | None], alpha: float,
    invalid: Mapping[str, int] | None = None,
    invalid_after: int = NO_VALID_LOSS_INTERVALS,
    pace: Mapping[str, float] | None = None,
    slow_after: int = SLOW_PACE_INTERVALS,
    limits: Mapping[str, float] | None = None,
) -> CategorizeResult:
    """One categorisation interval on one worker.

    ``states`` holds every job on the worker; ``growth`` this interval's G per job (None or
    absent: no measurement, the job keeps its state); ``invalid`` the intervals in a row each
    job logged losses but no finite one (:attr:`specon.core.growth.LossTrack.invalid`): from
    ``invalid_after`` on, a progressing job is watching; ``pace`` each job's loss lines per
    second over the interval (absent: unknown, the interval is judged): a slow interval does
    not demote a job, ``slow_after`` of them in a row at most; ``limits`` each job's CPU
    limit now (a fraction of the node; absent: unknown): an interval over which it fell under
    ``SLOW_PACE`` of the limit the interval began with is slow too.
    """
    if not alpha > 0:
        raise ValueError("alpha must be > 0")
    new: dict[str, JobState] = {}
    stayed_converged: list[str] = []
    for name, st in states.items():
        g = growth.get(name)
        limit = limits.get(name) if limits else None
        cut = st.limit is not None and limit is not None and limit < SLOW_PACE * st.limit
        if limit != st.limit:
            st = replace(st, limit=limit)  # the next interval begins at this limit
        if not st.migrated and g is None and invalid and invalid.get(name, 0) >= invalid_after:
            new[name] = _no_valid_loss(st)
            continue
        if st.migrated or g is None:
            new[name] = st
            continue
        judged = _judge(st, g, alpha, pace.get(name) if pace else None, slow_after, cut)
        if judged.category is Category.CONVERGED and st.category is Category.CONVERGED \
                and g < alpha:  # a slow interval too: it cannot demote a converged job
            stayed_converged.append(name)
        new[name] = judged
    active = sum(1 for s in new.values() if s.category is not Category.CONVERGED)
    requests = tuple(sorted(stayed_converged)) if active > 1 else ()
    return CategorizeResult(states=new, reallocation_requests=requests)


def counts(states: Mapping[str, JobState]) -> tuple[int, int, int]:
    """(|PC|, |WC|, |CC|) of one worker."""
    pc = sum(1 for s in states.values() if s.category is Category.PROGRESSING)
    wc = sum(1 for s in states.values() if s.category is Category.WATCHING)
    return pc, wc, len(states) - pc - wc
