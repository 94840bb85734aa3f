"""Where a new job goes under the progress-aware policy: on the node where it adds the least to
the predicted sum of its jobs' times to finish (:func:`specon.core.progress.predicted_times`),
its own included, within bounds on what it gives up itself (OWN_TIME_BOUND, and for a job that
cannot be moved SERIAL_TIME_BOUND). The simulator's placement calls :func:`choose_node`; the
manager's scheduler extender :func:`placement_scores`, which gives that node the top score.

Pure: state in, decisions out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from specon.core.progress import (
    WEIGHTS,
    JobLoad,
    NodeLoad,
    backlog,
    floored,
    guess_floor,
    guesses_floored,
    least_loaded,
    load_key,
    predicted_sum,
    predicted_times,
    top_rate,
)
from specon.core.scoring import Weights

#: A new job is never placed where its own predicted time to finish is over this many times
#: its time on the candidate where it would finish soonest, whatever the others gain (a bound on
#: what one job gives up for the sum: issue 28's worst job).
OWN_TIME_BOUND = 1.5
#: A new job that cannot be moved is never placed where, run as one thread, it would take over
#: this many times its one-thread time on the best candidate. Its speed-up is a guess (the
#: manager knows none: linear up to the cores its kind uses), and a job that does not scale,
#: put on many cores slow per core for their sum, is stuck there (issue 28: a long job of a
#: kind that does not scale, placed on 8 cores of speed 0.29, ran 7.6 times its default time).
#: A job that can be moved is moved off a bad guess once its progress tells (plan_moves).
SERIAL_TIME_BOUND = 2.0
#: A new job of which nothing is known (no work figure: the first pod of its kind on an empty
#: cluster) is taken at this many seconds of work when its one-thread times are compared: with
#: none, every node's time is 0 and the bound keeps them all (issue 28: the first job of
#: `standard` 21, long and not movable, went to 32 cores of speed 0.85 beside 4 of 1.98). On
#: empty nodes any positive figure gives the same ratios (its speeds per core).
UNKNOWN_WORK_S = 60.0
#: A new job that can neither be moved nor tells its length (it declares no total) is placed
#: as at least the mean declared job (:func:`guess_floor`), and only where its own predicted
#: time is within this many times its best (not OWN_TIME_BOUND): no move will correct where
#: it lands, for however long it turns out to run. Taken as short, as a movable one is, such
#: a job went where it disturbed the others least, a big node slower per core, and set the
#: makespan there (issue 28: `bursty` 19 of the 180, noisy logs, +16.8% makespan; with this
#: rule -4.6%; docs/parameters.md). The floor alone changes nothing there; the bound alone
#: sends every such job to the node fastest per core (a job 6.11 times its default time).
FIXED_OWN_TIME_BOUND = 1.25
#: Besides the CANDIDATES least loaded, the nodes where the job runs fastest are compared.
FASTEST = 4
#: Placements within this share of the least added are taken as equal (then: least backlog).
TOLERANCE = 0.01


def choose_node(nodes: Sequence[NodeLoad], job: JobLoad, weights: Weights = WEIGHTS,
                tolerance: float = TOLERANCE) -> str | None:
    """The node where the new job adds the least to the predicted sum of times to finish,
    among those where its own predicted time is within OWN_TIME_BOUND of its best (and, for a
    job that cannot be moved, its time as one thread within SERIAL_TIME_BOUND); among
    nodes within ``tolerance`` of the least (the model sees no cost in sharing a node whose
    jobs cannot use all of it, a real node does), the one with the least backlog, then the
    larger, then by name. Only the CANDIDATES least loaded nodes and the FASTEST nodes for
    the job are compared."""
    if not nodes:
        return None
    return _choose(*_compare(*_as_placed(nodes, job), weights), tolerance, _own_bound(job))


def _as_placed(nodes: Sequence[NodeLoad], job: JobLoad) -> tuple[list[NodeLoad], JobLoad]:
    """``nodes`` and a new ``job`` as placement compares them: the guesses floored
    (:func:`guess_floor`), the jobs on ``nodes`` at the mean declared job, a new ``job`` that
    declares no total at UNKNOWN_WORK_S (placed as short, as the node rule serves it: first,
    until its steps say more; at the mean declared job, the widened suite with noisy logs lost
    83% makespan on one workload and a job ran 7.1 times its default time), unless it cannot be
    moved either: then at least at the mean declared job (FIXED_OWN_TIME_BOUND)."""
    floor = guess_floor(nodes)
    return guesses_floored(nodes, floor), floored(
        job, max(UNKNOWN_WORK_S, floor) if _fixed_guess(job) else UNKNOWN_WORK_S)


def _fixed_guess(job: JobLoad) -> bool:
    """Whether a new job can neither be moved nor tells its length (FIXED_OWN_TIME_BOUND)."""
    return job.guessed and not job.movable


def _own_bound(job: JobLoad) -> float:
    """How far over its best own time a new job may be placed: FIXED_OWN_TIME_BOUND for one
    that can neither be moved nor tells its length, else OWN_TIME_BOUND."""
    return FIXED_OWN_TIME_BOUND if _fixed_guess(job) else OWN_TIME_BOUND


def _compare(nodes: Sequence[NodeLoad], job: JobLoad, weights: Weights
             ) -> tuple[list[NodeLoad], dict[str, float], dict[str, float]]:
    """The candidates for a new job (the CANDIDATES least loaded and the FASTEST for it, less
    those :func:`_serial_fit` rules out for a job that cannot be moved), what it adds to each
    one's predicted sum of times to finish, and its own predicted time there (``nodes`` and
    ``job`` as :func:`_as_placed` gives them)."""
    picked = {n.name: n for n in least_loaded(nodes)}
    if FASTEST and len(nodes) > len(picked):
        fastest = sorted(nodes, key=lambda n: (-top_rate(job, n), *load_key(
            sum(j.work for j in n.jobs), n.capacity, n.name)))[:FASTEST]
        picked.update((n.name, n) for n in fastest)
    delta, own = {}, {}
    for n in picked.values():
        times = predicted_times(n, job, weights)
        delta[n.name] = sum(times.values()) - predicted_sum(n, None, weights)
        own[n.name] = times[job.name]
    candidates = list(picked.values())
    if not job.movable:
        candidates = _serial_fit(candidates, job, weights)
    return candidates, delta, own


def _serial_fit(nodes: list[NodeLoad], job: JobLoad, weights: Weights) -> list[NodeLoad]:
    """Those of ``nodes`` where ``job``, were it one thread, would finish within
    SERIAL_TIME_BOUND of its soonest finish as one thread among them (a job with no work
    figure taken at UNKNOWN_WORK_S)."""
    one = replace(job, cap=min(job.cap, 1.0), threads=None,
                  work=job.work if job.work > 0 else UNKNOWN_WORK_S)
    alone = {n.name: predicted_times(n, one, weights)[job.name] for n in nodes}
    bound = SERIAL_TIME_BOUND * min(alone.values())
    return [n for n in nodes if alone[n.name] <= bound * (1 + 1e-9)]


def _choose(nodes: list[NodeLoad], delta: dict[str, float], own: dict[str, float],
            tolerance: float, own_bound: float) -> str:
    """:func:`choose_node`'s pick among :func:`_compare`'s candidates, none of them with its own
    time over ``own_bound`` times the least (:func:`_own_bound`)."""
    bound = own_bound * min(own[n.name] for n in nodes)
    nodes = [n for n in nodes if own[n.name] <= bound * (1 + 1e-9)]
    least = min(delta[n.name] for n in nodes)
    near = [n for n in nodes if delta[n.name] <= least + tolerance * max(least, 1e-9)]
    return min(near, key=lambda n: (backlog(n), -n.capacity, n.name)).name


def placement_scores(nodes: Sequence[NodeLoad], job: JobLoad, weights: Weights = WEIGHTS,
                     max_score: int = 10) -> dict[str, int]:
    """Scheduler priorities 1..max_score for placing ``job``: the node :func:`choose_node` picks
    gets max_score, the others fall linearly with what the job would add to their predicted
    sum of completion times (only the CANDIDATES least loaded are modelled; the rest get 1, as
    do those ruled out for a job that cannot be moved: SERIAL_TIME_BOUND)."""
    if not nodes:
        return {}
    nodes, job = _as_placed(nodes, job)
    candidates, added, own = _compare(nodes, job, weights)
    best = _choose(candidates, added, own, TOLERANCE, _own_bound(job))
    kept = {n.name for n in candidates}
    delta = {n.name: added[n.name] for n in least_loaded(nodes)  # the same predictions
             if n.name in kept}
    out = dict.fromkeys((n.name for n in nodes), 1)
    if delta:  # none when every least loaded node is ruled out and a fastest one is kept
        lo, hi = min(delta.values()), max(delta.values())
        for name, d in delta.items():
            frac = 1.0 if hi - lo < 1e-12 else (hi - d) / (hi - lo)
            out[name] = 1 + round((max_score - 2) * frac)
    out[best] = max_score
    return out
