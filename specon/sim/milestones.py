"""When a profile's loss reaches a level: the milestones the simulator, the oracle, the
generator and the benchmarks measure (reaching 90% of the fall, reaching a target)."""

from __future__ import annotations

from collections.abc import Sequence

from specon.workload.models import Profile


def smoothed(loss: Sequence[float], window: int = 5) -> list[float]:
    """Running median of the logged loss (what 'reached' means for noisy curves)."""
    out: list[float] = []
    half = window // 2
    for i in range(len(loss)):
        seg = sorted(loss[max(0, i - half) : i + half + 1])
        out.append(seg[len(seg) // 2])
    return out


def milestone_iteration(profile: Profile, level: float) -> float | None:
    """The iteration at which the smoothed loss first reaches ``level`` (None: never)."""
    sm = smoothed(profile.loss)
    n = len(sm)
    for k, v in enumerate(sm):
        if v <= level:
            return (k + 1) * profile.iterations / n
    return None


def ninety_iteration(profile: Profile) -> float:
    sm = smoothed(profile.loss)
    first, low = sm[0], min(sm)
    it = milestone_iteration(profile, first - 0.9 * (first - low))
    return it if it is not None else float(profile.iterations)
