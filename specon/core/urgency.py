"""Which jobs need CPU first to meet a quality target or a deadline (DQoES / QoS-oriented).

Pure: the caller predicts how many steps a job still needs (to its target loss, from
:mod:`specon.core.predict`, or to its end) and at what rates it runs now and could run with
every core it can use; this module ranks it. The simulator's ``dqoes`` and ``deadline``
policies and the agent use the same rule.

Levels (lower first): at-risk jobs that more CPU can still save, by least laxity (seconds of
slack at full speed); then jobs on track and jobs without a target or deadline; last, jobs
whose target is reached or that cannot make it even at full speed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

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


#: An on-track job that gives CPU up keeps enough to finish at this share of its time left.
GIVE = 0.75


@dataclass(frozen=True, slots=True)
class Assessment:
    """Where one job with a target or a deadline stands (the agent's view, reported)."""

    state: str  # "on-track", "at-risk", "given-up" or "reached"
    level: int  # :func:`urgency`, lower first
    #: Seconds to the goal (the target, else the end) at the current rate; None: unknown.
    predicted_s: float | None = None
    slack_s: float | None = None  # time left minus predicted_s (None: no deadline or unknown)
    #: Cores the job needs to reach its goal at ``GIVE`` of its time left, at its measured
    #: speed per core (None: unknown, or no deadline).
    need_cores: float | None = None


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
        return Assessment("reached", GIVEN_UP, 0.0, None, 0.0)
    per_core = rate_now / cores_now if rate_now > 0 and cores_now > 0 else 0.0
    if steps_left is None or per_core <= 0:
        return Assessment("on-track", ON_TRACK)
    if math.isinf(steps_left):
        return Assessment("given-up", GIVEN_UP)
    level = urgency(steps_left, rate_now, per_core * best_cores, time_left)
    predicted = steps_left / rate_now
    if math.isinf(time_left):
        return Assessment("on-track", level, predicted)
    slack = time_left - predicted
    need = steps_left / max(give * time_left, 1e-9) / per_core
    state = "on-track" if level == ON_TRACK else "given-up" if level >= GIVEN_UP else "at-risk"
    return Assessment(state, level, predicted, slack, need)


#: A pressed job stays pressed until its need falls below this share of an equal share.
RELEASE = 0.5


def pressed_jobs(
    jobs: Mapping[str, Assessment | None], node_cpus: float, was: frozenset[str] = frozenset()
) -> frozenset[str]:
    """The jobs that plain sharing would make late and that can still make it.

    A job becomes *pressed* when it needs more cores than an equal share of the node (what
    default sharing gives it); it stays pressed, once given the CPU, until its need falls
    below ``RELEASE`` of that share, or it gives up, reaches its target or leaves. Without
    this hysteresis a job that catches up would lose the CPU, fall behind and get it back at
    every other tick.
    """
    fair = node_cpus / max(1, len(jobs))
    out = set()
    for name, a in jobs.items():
        if a is None or a.need_cores is None or a.state in ("given-up", "reached"):
            continue
        if a.need_cores > fair or (name in was and a.need_cores > RELEASE * fair):
            out.add(name)
    return frozenset(out)


def qos_limits(
    jobs: Mapping[str, Assessment | None], node_cpus: float, floor: float,
    pressed: frozenset[str] | None = None,
) -> dict[str, float | None]:
    """Node-level CPU limits (fractions of the node) for the jobs of one node.

    While any job is pressed (:func:`pressed_jobs`, computed here when not given), pressed
    jobs may use the whole node; jobs with a deadline that are not pressed keep the cores they
    need to finish at ``GIVE`` of their time left; jobs past saving are held at ``floor``. A
    job whose target is reached is held at ``floor`` always when it shares the node (its CPU
    is better used by the others). None: no say (the job keeps FlowCon's limit); so do all
    jobs when nobody is pressed.
    """
    floor = max(0.0, min(1.0, floor))
    if pressed is None:
        pressed = pressed_jobs(jobs, node_cpus)
    out: dict[str, float | None] = {}
    for name, a in jobs.items():
        if a is None:
            out[name] = None
        elif a.state == "reached" and len(jobs) > 1:
            out[name] = floor
        elif not pressed:
            out[name] = None
        elif name in pressed:
            out[name] = 1.0
        elif a.state == "given-up":
            out[name] = floor
        elif a.need_cores is not None:
            out[name] = max(floor, min(1.0, a.need_cores / node_cpus))
        else:
            out[name] = None
    return out
