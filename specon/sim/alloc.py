"""How a worker's CPU is divided: work-conserving CFS-like shares, capped per container."""

from __future__ import annotations

from collections.abc import Sequence

from specon.core.shares import by_priority, waterfill

__all__ = ["by_priority", "greedy_marginal", "waterfill"]


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
