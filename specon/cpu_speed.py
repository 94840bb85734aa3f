"""The value of the ``specon.io/cpu-speed`` node label: a node's per-core speed relative to
the cluster's others (specon_manager.node_speed reads it for the placement; ``kubectl specon
nodes`` shows it). Pure: a string in, a speed or None out."""

from __future__ import annotations

import math

#: The bounds of a label's value (a 400x spread; the simulator's widest suite spans 16x).
MIN_SPEED = 0.05
MAX_SPEED = 20.0
#: A node without the label (or with a bad one).
DEFAULT_SPEED = 1.0


def parse_cpu_speed(value: object) -> float | None:
    """The label's value as a speed, or None when it is not a number within the bounds."""
    if not isinstance(value, str) or not 0 < len(value) <= 16:
        return None
    try:
        speed = float(value)
    except ValueError:
        return None
    if not math.isfinite(speed) or not MIN_SPEED <= speed <= MAX_SPEED:
        return None
    return speed
