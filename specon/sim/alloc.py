"""How a worker's CPU is divided: work-conserving CFS-like shares, capped per container."""

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


def greedy_marginal(
    capacity: float,
    caps: Sequence[float],
    value: Sequence[float],
    speed: Sequence[object],
    quantum: float,
) -> list[float]:
    """SLAQ-style: hand out ``quantum`` cores at a time to the largest marginal gain.

    ``speed[i]`` is a callable cores -> relative speed; the gain of a quantum is
    value[i] * (speed(c + q) - speed(c)). Leftover CPU with no gain is shared equally (the
    allocation stays work-conserving).
    """
    n = len(caps)
    out = [0.0] * n
    left = capacity
    while left > 1e-9:
        best, gain = -1, 0.0
        for i in range(n):
            room = caps[i] - out[i]
            if room <= 1e-12:
                continue
            q = min(quantum, room, left)
            f = speed[i]
            assert callable(f)
            g = value[i] * (f(out[i] + q) - f(out[i]))
            if g > gain + 1e-15:
                best, gain = i, g
        if best < 0:
            break
        q = min(quantum, caps[best] - out[best], left)
        out[best] += q
        left -= q
    if left > 1e-9:
        extra = waterfill(left, [c - o for c, o in zip(caps, out, strict=True)], [1.0] * n)
        out = [o + e for o, e in zip(out, extra, strict=True)]
    return out
