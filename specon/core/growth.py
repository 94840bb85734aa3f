"""Growth and growth efficiency of a training job, made scale-free.

The research defines progress as |E(t_i) - E(t_{i-1})| / (t_i - t_{i-1}) on the raw loss E, with
thresholds set per model. We normalise so that one alpha serves every model (see
docs/normalisation.md):

* E(t_m) for an interval is the *median* of the loss values logged in that interval:
  minibatch losses are noisy and one outlier must not decide a category. An interval that
  logged nothing gives no measurement (not a growth of zero).
* The scale of a job is the range of its interval values seen so far (first value to lowest),
  floored at a small fraction of the first value's magnitude so that a flat start cannot divide
  by zero.
* progress = |dE| / scale per minute: "the share of all the improvement seen so far that this
  job made in the last minute". Efficiency divides progress by the cores the job used.
* The pace of an interval is the loss lines it logged per second: steps per second for a job
  that logs every so many steps. Categories use it to tell a job held back from one that
  flattened (:mod:`specon.core.categorize`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

#: Floor of the scale, as a fraction of |first value| (and an absolute floor below that).
SCALE_FLOOR_REL = 1e-6
SCALE_FLOOR_ABS = 1e-12
#: Minimum CPU (cores) a job is credited with when computing efficiency, so that a job that was
#: starved for a whole interval does not get an infinite efficiency.
MIN_CORES = 0.01


def interval_value(samples: Sequence[float], previous: float | None) -> float | None:
    """E(t_m): the median of the finite values logged in the interval, else the previous value."""
    finite = sorted(v for v in samples if math.isfinite(v))
    if not finite:
        return previous
    n = len(finite)
    mid = n // 2
    return finite[mid] if n % 2 else (finite[mid - 1] + finite[mid]) / 2.0


@dataclass(frozen=True, slots=True)
class Growth:
    """One interval's measurement of a job."""

    progress: float  # normalised loss change per minute (>= 0)
    efficiency: float  # progress per core used over the interval
    value: float  # E(t_m)
    cores: float  # average cores used over the interval
    pace: float = 0.0  # loss lines logged per second over the interval


@dataclass(frozen=True, slots=True)
class LossTrack:
    """What the normaliser remembers of one job: its first, highest and lowest interval values."""

    first: float | None = None
    high: float = -math.inf
    low: float = math.inf
    last: float | None = None
    #: Intervals in a row that logged losses but no finite one (NaN, inf): no valid loss. An
    #: interval that logged nothing neither counts nor resets it.
    invalid: int = 0

    @property
    def scale(self) -> float:
        if self.first is None:
            return 1.0
        floor = max(abs(self.first) * SCALE_FLOOR_REL, SCALE_FLOOR_ABS)
        return max(self.high - self.low, floor)

    def observe(
        self, samples: Sequence[float], dt_s: float, cpu_seconds: float
    ) -> tuple[LossTrack, Growth | None]:
        """Take one interval's logged losses; return the new track and the interval's growth.

        The growth is None until the job has two interval values (nothing to compare yet), when
        the interval has no length, or when the job logged nothing new in it: sparse logging
        is no evidence of slow progress, so it must not demote a job. An interval that logged
        only non-finite losses has no growth either, but counts in :attr:`invalid`
        (:func:`specon.core.categorize.categorize` judges that).
        """
        value = interval_value(samples, None)
        if value is None:
            return (replace(self, invalid=self.invalid + 1) if samples else self), None
        if self.first is None:
            return LossTrack(first=value, high=value, low=value, last=value), None
        track = replace(self, high=max(self.high, value), low=min(self.low, value), last=value,
                        invalid=0)
        if dt_s <= 0 or self.last is None:
            return track, None
        progress = abs(value - self.last) / track.scale * 60.0 / dt_s
        cores = max(cpu_seconds / dt_s, MIN_CORES)
        growth = Growth(progress=progress, efficiency=progress / cores, value=value, cores=cores,
                        pace=len(samples) / dt_s)
        return track, growth
