"""How fast a training job runs with a given number of threads and a given amount of CPU.

A profile's speed-up table says how fast the job runs with k threads on k cores, relative to
one thread on one core (linear below the smallest key, flat beyond the largest: a job cannot
use more cores than that). Two facts of real nodes are added here, calibrated on the quiet
16-core host of ``shared/data/cpu-scaling-16core`` (docs/node-model.md gives the numbers):

* **More threads than cores costs.** A k-thread job that gets c < k cores (a CFS quota, or
  contention) runs at the speed of c threads times ``1 - penalty * (1 - c / k)``: a CNN with 2,
  4 and 8 threads under a 1-core quota lost 9%, 20% and 21%; the fitted ``penalty`` is 0.22.
  It never runs faster than with all its threads on their own cores, so a CPU limit can never
  speed a job up.
* **Co-located jobs interfere.** Four single-thread jobs on four cores each ran about 10%
  slower than one alone; the slow-down grows with the share of the other cores in use.

Pure functions; the simulator, the oracle and the policies all use these.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

#: Throughput lost at the limit of heavy oversubscription (threads >> cores).
OVERSUBSCRIPTION_PENALTY = 0.22
#: Slow-down of a job when every other core of its worker is busy with other jobs.
INTERFERENCE = 0.10


@dataclass(frozen=True, slots=True)
class Curve:
    """A speed-up table: ``xs`` cores (ascending, > 0), ``ys`` relative speeds (> 0)."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    @staticmethod
    def of(points: Sequence[tuple[float, float]]) -> Curve:
        pts = sorted(points)
        if not pts or any(x <= 0 or y <= 0 for x, y in pts):
            raise ValueError("a speed-up table needs positive (cores, speed) points")
        return Curve(tuple(p[0] for p in pts), tuple(p[1] for p in pts))

    @property
    def max_cores(self) -> float:
        return self.xs[-1]

    def at(self, cores: float) -> float:
        """Interpolated speed with ``cores`` threads on as many cores."""
        xs, ys = self.xs, self.ys
        if cores <= 0:
            return 0.0
        cores = min(cores, xs[-1])
        if cores <= xs[0]:
            return ys[0] * cores / xs[0]
        i = bisect.bisect_left(xs, cores)
        if xs[i] == cores:
            return ys[i]
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (cores - x0) / (x1 - x0)

    def envelope(self, cores: float) -> float:
        """The best speed reachable with at most ``cores`` cores (non-decreasing)."""
        best = self.at(cores)
        for x, y in zip(self.xs, self.ys, strict=True):
            if x > cores:
                break
            best = max(best, y)
        return best

    def best_threads(self) -> float:
        """The fastest measured thread count (fewer threads on a tie)."""
        return max(zip(self.xs, self.ys, strict=True), key=lambda p: (p[1], -p[0]))[0]

    def hull(self) -> list[tuple[float, float]]:
        """Vertices of the least concave non-decreasing majorant through (0, 0), ending at the
        top speed (flat beyond it). Every real speed lies on or under it."""
        pts = [(0.0, 0.0)]
        top = 0.0
        for x, y in zip(self.xs, self.ys, strict=True):
            top = max(top, y)
            pts.append((x, top))
        out: list[tuple[float, float]] = []
        for p in pts:
            while len(out) >= 2:
                (x1, y1), (x2, y2) = out[-2], out[-1]
                # drop the middle point if it lies on or under the chord
                if (y2 - y1) * (p[0] - x1) <= (p[1] - y1) * (x2 - x1) + 1e-15:
                    out.pop()
                else:
                    break
            out.append(p)
        # cut at the first vertex reaching the top speed (flat afterwards)
        for i, (_, y) in enumerate(out):
            if y >= top - 1e-15:
                return out[: i + 1]
        return out


def thread_speed(curve: Curve, threads: float, cores: float,
                 penalty: float = OVERSUBSCRIPTION_PENALTY) -> float:
    """Relative speed of a job running ``threads`` threads on ``cores`` cores of CPU.

    With ``cores >= threads`` it is the table's speed at ``threads``; below, the speed of as
    many threads as cores, less the oversubscription penalty, and never more than with all
    threads on their own cores. Non-decreasing in ``cores``.
    """
    k = min(max(threads, 1e-9), curve.max_cores)
    if cores <= 0:
        return 0.0
    if cores >= k:
        return curve.at(k)
    squeezed = curve.envelope(cores) * (1.0 - penalty * (1.0 - cores / k))
    return min(curve.at(k), squeezed)


def interference(cpus: float, own: float, others: float,
                 strength: float = INTERFERENCE) -> float:
    """Speed factor of a job using ``own`` cores while other jobs use ``others`` of ``cpus``."""
    room = cpus - own
    if room <= 1e-9 or others <= 0:
        return 1.0
    return 1.0 - strength * min(1.0, others / room)
