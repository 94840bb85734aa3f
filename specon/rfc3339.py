"""RFC 3339 times in UTC, as the Kubernetes API writes them: whole seconds (``metav1.Time``:
annotations, event notes, logs) or microseconds (``MicroTime``: a Lease's ``renewTime``, an
Event's ``eventTime``); and back to a Unix time. Standard library only (the agent uses it)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

_SECONDS = "%Y-%m-%dT%H:%M:%S"


def seconds(t: float) -> str:
    """``2026-11-26T19:32:13Z``: Unix time ``t`` cut to the second below (as Go's
    ``metav1.Time`` writes it, so a time is never shown later than it was)."""
    return time.strftime(_SECONDS + "Z", time.gmtime(t))


def micro(t: float) -> str:
    """``2026-11-26T19:32:13.250000Z``: Unix time ``t`` rounded to the microsecond (half to
    even, as ``datetime`` rounds a float)."""
    return datetime.fromtimestamp(t, UTC).strftime(_SECONDS + ".%fZ")


def micro_ns(ns: int) -> str:
    """``micro`` of a time in integer nanoseconds (``time.time_ns()``), exactly: the part
    below a microsecond is cut, not rounded, and no float is involved."""
    whole, rest = divmod(ns, 1_000_000_000)
    return time.strftime(_SECONDS, time.gmtime(whole)) + f".{rest // 1000:06d}Z"


def parse(text: str) -> float:
    """The Unix time of an RFC 3339 time (``Z`` or an offset; fractions up to microseconds).
    A text with no offset is read as local time. ValueError when it is not one."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
