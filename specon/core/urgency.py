"""Which jobs need CPU first to meet a quality target or a deadline (DQoES / QoS-oriented).

Pure: the caller predicts how many steps a job still needs (to its target loss, from
:mod:`specon.core.predict`, or to its end) and at what rates it runs now and could run with
every core it can use; this module ranks it (:func:`urgency`, what the simulator's ``dqoes``
and ``deadline`` policies divide a worker by) and turns a node's ranking into CPU limits
(:func:`assess`, :func:`prioritised`, :func:`qos_limits`: what the node agent applies, and the
simulator's ``agent-qos`` policy).

Levels (lower first): at-risk jobs that more CPU can still save, by least laxity (seconds of
slack at full speed); then jobs on track and jobs without a target or deadline; last, jobs
whose target is reached or that cannot make it even at full speed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from specon.core.shares import by_priority

#: A job is on track when its predicted time is within this share of the time it has left.
MARGIN = 0.9
ON_TRACK = 10**9
GIVEN_UP = 2 * 10**9


def urgency(
    steps_left: float | None,
    rate_now: float,
    rate_best: float,
    time_left: float,
    margin: float = MARGIN,
) -> int:
    """The job's level. ``steps_left`` None: unknown (on track); inf: never reached."""
    if steps_left is None:
        return ON_TRACK
    if math.isinf(steps_left):
        return GIVEN_UP
    best = steps_left / max(rate_best, 1e-12)
    if steps_left / max(rate_now, 1e-12) <= margin * time_left:
        return ON_TRACK
    if best > time_left:
        return GIVEN_UP
    return min(ON_TRACK - 1, int(time_left - best))


#: The cores a job needs are those that reach its goal at this share of its time left.
GIVE = 0.75
#: A job is put first only if it needs more than this share of an equal share of the node.
SHARE = 0.75


@dataclass(frozen=True, slots=True)
class Assessment:
    """Where one job with a target or a deadline stands (the agent's view, reported)."""

    state: str  # "on-track", "at-risk", "given-up" or "reached"
    #: Seconds to the goal (the target, else the end) at the current rate; None: unknown.
    predicted_s: float | None = None
    slack_s: float | None = None  # time left minus predicted_s (None: no deadline or unknown)
    #: Cores the job needs to reach its goal at ``GIVE`` of its time left, at its measured
    #: speed per core (None: unknown, or no deadline).
    need_cores: float | None = None
    best_cores: float = 0.0  # the most it can use
    #: Its laxity level (seconds of slack at full speed), whatever its state; ON_TRACK when
    #: unknown.
    laxity: int = ON_TRACK


def assess(
    steps_left: float | None,
    rate_now: float,
    cores_now: float,
    best_cores: float,
    time_left: float,
    reached: bool = False,
    give: float = GIVE,
) -> Assessment:
    """One job's state. ``steps_left``: to the goal (None unknown, inf never); ``rate_now`` in
    steps/s measured while the job used ``cores_now`` cores; ``best_cores``: the most it could
    use; ``time_left``: seconds to its deadline (inf: none)."""
    if reached:
        return Assessment("reached", 0.0, None, 0.0, best_cores)
    per_core = rate_now / cores_now if rate_now > 0 and cores_now > 0 else 0.0
    if steps_left is None or per_core <= 0:
        return Assessment("on-track", best_cores=best_cores)
    if math.isinf(steps_left):
        return Assessment("given-up", best_cores=best_cores)
    rate_best = per_core * best_cores
    level = urgency(steps_left, rate_now, rate_best, time_left)
    predicted = steps_left / rate_now
    if math.isinf(time_left):
        return Assessment("on-track", predicted, best_cores=best_cores)
    slack = time_left - predicted
    # Past its deadline no number of cores is enough: none is said (it read 1e10 in logs).
    need = steps_left / (give * time_left) / per_core if time_left > 0 else None
    state = "on-track" if level == ON_TRACK else "given-up" if level >= GIVEN_UP else "at-risk"
    laxity = max(0, min(ON_TRACK - 1, int(time_left - steps_left / max(rate_best, 1e-12))))
    return Assessment(state, predicted, slack, need, best_cores, laxity)


def prioritised(
    jobs: Mapping[str, Assessment | None], node_cpus: float, was: frozenset[str] = frozenset()
) -> frozenset[str]:
    """The jobs that get the CPU first: at risk now (or given it before, ``was``) and needing
    more than :data:`SHARE` of an equal share of the node to reach their goal at :data:`GIVE`
    of their time left.

    The equal share is what plain sharing would give: a job that would be comfortably in time
    with it is not put first, even when it is late at its current rate (for instance because
    it is held low for another job: otherwise the jobs that yield would take turns at being
    first). A job once put first keeps its place while it still needs that much, though at its
    new rate it soon looks on track; the test does not depend on what the job gets now, so
    the decision does not flap.
    """
    share = node_cpus / max(1, len(jobs))
    out = set()
    for name, a in jobs.items():
        if a is None or a.need_cores is None or a.state in ("given-up", "reached"):
            continue
        fair = min(share, a.best_cores) if a.best_cores > 0 else share
        if (a.state == "at-risk" or name in was) and a.need_cores > SHARE * fair:
            out.add(name)
    return frozenset(out)


def qos_limits(
    jobs: Mapping[str, Assessment | None], node_cpus: float, floor: float,
    first: frozenset[str] | None = None,
) -> dict[str, float | None]:
    """Node-level CPU limits (fractions of the node) for the jobs of one node.

    While some job is prioritised (:func:`prioritised`, computed here when ``first`` is not
    given), the node's CPU is divided by strict priority (:func:`by_priority`): prioritised
    jobs first, least laxity first, each up to the cores it can use; then the jobs on track
    and the jobs without a target or deadline, equally; last the jobs past saving or whose
    target is reached. That division becomes limits: the most urgent jobs may use the whole
    node (what they leave flows on), every other job with a target or deadline is held at its
    part (never below ``floor``), the jobs past saving or whose target is reached last. Jobs
    without a target or deadline get no limit from here (None: they keep the node's share
    rule's or FlowCon's), nor does anyone when no job is prioritised: a job yields only to a
    job that needs the CPU, so a missed deadline or a reached target costs no more than the
    node's own rule would (docs/qos.md).
    """
    floor = max(0.0, min(1.0, floor))
    if first is None:
        first = prioritised(jobs, node_cpus)
    names = list(jobs)
    if len(names) < 2 or not first:
        return dict.fromkeys(names)
    levels, caps = [], []
    for n in names:
        a = jobs[n]
        if n in first and a is not None:
            levels.append(a.laxity)
            caps.append(min(node_cpus, a.best_cores) if a.best_cores > 0 else node_cpus)
        else:
            levels.append(GIVEN_UP if a is not None and a.state in ("given-up", "reached")
                          else ON_TRACK)
            caps.append(node_cpus)
    parts = by_priority(node_cpus, caps, levels)
    top = min((lv for n, lv in zip(names, levels, strict=True) if n in first), default=ON_TRACK)
    out: dict[str, float | None] = {}
    for n, lv, part in zip(names, levels, parts, strict=True):
        if jobs[n] is None:
            out[n] = None
        elif lv <= top:
            out[n] = 1.0 if n in first else None
        else:
            out[n] = max(floor, min(1.0, part / node_cpus))
    return out
