"""A job's steps (and CPU counter) over a recent window of wall time: its step rate and the cores
it used there. One window serves the ETA (specon_agent/eta.py, every job) and the quality
tracker (specon_agent/qos_tracker.py, jobs with a target or a deadline).

The rate is the steps done over the last ``window_s`` (at least half of it seen: a shorter span
is too short to trust). No I/O and no clock: the caller feeds the time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple


class Sample(NamedTuple):
    t: float
    step: float
    cpu_ns: int | None = None


@dataclass
class StepRate:
    """A job's steps over a recent window of wall time."""

    window_s: float = 30.0
    samples: deque[Sample] = field(default_factory=deque)
    counted: bool = False  # its steps are counted records (the log carries no step numbers)

    def add(self, now: float, step: float, counted: bool = False) -> None:
        """A poll's last step (``counted``: from records without step numbers); none is kept
        before the first step."""
        self.counted = self.counted or counted
        if step <= 0:
            return  # still starting: no step yet
        self.record(now, step)

    def record(self, now: float, step: float, cpu_ns: int | None = None) -> None:
        """A sample as it is, the window trimmed to ``window_s`` (two samples kept at least)."""
        self.samples.append(Sample(now, step, cpu_ns))
        while len(self.samples) > 2 and now - self.samples[1].t >= self.window_s:
            self.samples.popleft()

    def span(self) -> tuple[Sample, Sample] | None:
        """The window's first and last samples; None when the span seen is under half of it."""
        if len(self.samples) < 2:
            return None
        a, b = self.samples[0], self.samples[-1]
        return None if b.t - a.t < self.window_s / 2 else (a, b)

    def rate(self) -> float | None:
        """Steps per second over the window; None when the span seen is under half of it."""
        span = self.span()
        if span is None:
            return None
        a, b = span
        return max(0.0, b.step - a.step) / (b.t - a.t)

    def cores(self) -> float | None:
        """Cores used over the window (its CPU counter); None when unknown."""
        span = self.span()
        if span is None:
            return None
        a, b = span
        if a.cpu_ns is None or b.cpu_ns is None or b.cpu_ns < a.cpu_ns:
            return None
        return (b.cpu_ns - a.cpu_ns) / 1e9 / (b.t - a.t)

    @property
    def step(self) -> float:
        return self.samples[-1].step if self.samples else 0.0

    @property
    def last_t(self) -> float | None:
        """When the last sample was taken (wall clock); None before the first step."""
        return self.samples[-1].t if self.samples else None
