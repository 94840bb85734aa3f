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


def limits_from_levels(levels: Mapping[str, int], floor: float) -> dict[str, float]:
    """Node-level CPU limits (fractions of the node) that express the levels with soft caps.

    At-risk jobs may use the whole node; jobs on track keep the whole node too (unused CPU
    flows between them); when any job is at risk, jobs that gave up or are done are held at
    the floor so the CPU goes to the at-risk ones. With nobody at risk nothing is capped.
    """
    at_risk = any(v < ON_TRACK for v in levels.values())
    return {
        name: (max(0.0, min(1.0, floor)) if at_risk and v >= GIVEN_UP else 1.0)
        for name, v in levels.items()
    }
