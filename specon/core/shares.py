"""How a node's CPU is divided: work-conserving CFS-like shares, capped per container, and
strict priority between levels. Used by the simulator to run a worker and by the QoS rule
(specon/core/urgency.py) to decide limits.
"""

from __future__ import annotations

from collections.abc import Sequence


def waterfill(capacity: float, caps: Sequence[float], weights: Sequence[float]) -> list[float]:
    """Share ``capacity`` in proportion to ``weights``, never giving anyone more than its cap.

    What a capped container cannot use flows to the others (CFS with quotas does this).
    """
    n = len(caps)
    out = [0.0] * n
    active = [i for i in range(n) if caps[i] > 0 and weights[i] > 0]
    left = capacity
    while active and left > 1e-12:
        wsum = sum(weights[i] for i in active)
        if wsum <= 0:
            break
        unit = left / wsum
        saturated = [i for i in active if caps[i] - out[i] <= weights[i] * unit + 1e-12]
        if not saturated:
            for i in active:
                out[i] += weights[i] * unit
            break
        for i in saturated:
            left -= caps[i] - out[i]
            out[i] = caps[i]
        active = [i for i in active if i not in set(saturated)]
    return out


def by_priority(
    capacity: float, caps: Sequence[float], levels: Sequence[int]
) -> list[float]:
    """Strict priority between levels (0 first), equal shares within a level."""
    out = [0.0] * len(caps)
    left = capacity
    for level in sorted(set(levels)):
        idx = [i for i, lv in enumerate(levels) if lv == level]
        got = waterfill(left, [caps[i] for i in idx], [1.0] * len(idx))
        for i, g in zip(idx, got, strict=True):
            out[i] = g
        left -= sum(got)
        if left <= 1e-12:
            break
    return out
