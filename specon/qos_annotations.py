"""Quality targets and deadlines as users write them: pod annotations, validated.

``specon.io/target-loss``: a finite number (the loss the job must reach).
``specon.io/deadline``: an RFC 3339 time (``2026-11-21T18:00:00Z``) or a duration after the
pod's creation (``90m``, ``2h30m``, ``3600s``, ``1d``).
``specon.io/stop-at-target``: ``true``/``false`` (default false): stop after the final
checkpoint once the target is reached.
``specon.io/total-steps``: a positive integer, the steps the job runs in all (what a deadline
without a target is measured against: the agent predicts the finish from the step rate).

Pure: the caller passes the annotations and the creation time and gets a :class:`QosSpec` or
one :class:`QosError` whose message names the annotation, for an event on the pod.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from specon.names import ANNOTATION_DEADLINE as DEADLINE
from specon.names import ANNOTATION_STOP_AT_TARGET as STOP_AT_TARGET
from specon.names import ANNOTATION_TARGET_LOSS as TARGET_LOSS
from specon.names import ANNOTATION_TOTAL_STEPS as TOTAL_STEPS

#: Every annotation this module reads (the agent and the manager look for these).
ANNOTATIONS = (TARGET_LOSS, DEADLINE, STOP_AT_TARGET, TOTAL_STEPS)
_MAX_STEPS = 10**12

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_MAX_DEADLINE_S = 366 * 86400.0


class QosError(Exception):
    """A malformed quality annotation; the message names it and says what is expected."""


@dataclass(frozen=True, slots=True)
class QosSpec:
    target_loss: float | None = None
    #: Seconds after the pod's creation by which it should complete.
    deadline_s: float | None = None
    stop_at_target: bool = False
    total_steps: int | None = None

    @property
    def empty(self) -> bool:
        return self.target_loss is None and self.deadline_s is None


def parse_duration(text: str) -> float:
    """'2h30m' -> 9000.0; raises ValueError for anything else."""
    s = text.strip().lower()
    if not s:
        raise ValueError("empty")
    pos, total = 0, 0.0
    for m in _DURATION.finditer(s):
        if m.start() != pos:
            raise ValueError(s)
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if pos != len(s):
        raise ValueError(s)
    return total


def parse(annotations: Mapping[str, str], created: datetime) -> QosSpec:
    """Read the quality annotations of a pod created at ``created`` (timezone-aware)."""
    target: float | None = None
    deadline: float | None = None
    stop = False
    raw = annotations.get(TARGET_LOSS)
    if raw is not None:
        try:
            target = float(raw)
        except ValueError:
            raise QosError(f"{TARGET_LOSS}: {raw!r} is not a number") from None
        if not math.isfinite(target):
            raise QosError(f"{TARGET_LOSS}: {raw!r} must be a finite number")
    raw = annotations.get(DEADLINE)
    if raw is not None:
        deadline = _deadline(raw, created)
    raw = annotations.get(STOP_AT_TARGET)
    if raw is not None:
        low = raw.strip().lower()
        if low not in ("true", "false"):
            raise QosError(f"{STOP_AT_TARGET}: {raw!r} must be true or false")
        stop = low == "true"
        if stop and target is None:
            raise QosError(f"{STOP_AT_TARGET}: set, but the pod has no {TARGET_LOSS}")
    steps: int | None = None
    raw = annotations.get(TOTAL_STEPS)
    if raw is not None:
        try:
            steps = int(raw.strip())
        except ValueError:
            raise QosError(f"{TOTAL_STEPS}: {raw!r} is not a whole number") from None
        if not 0 < steps <= _MAX_STEPS:
            raise QosError(f"{TOTAL_STEPS}: {raw!r} must be between 1 and {_MAX_STEPS}")
    return QosSpec(target_loss=target, deadline_s=deadline, stop_at_target=stop,
                   total_steps=steps)


def read(
    stated: Mapping[str, str], created: datetime | None
) -> tuple[QosSpec | None, str | None]:
    """What a pod's annotations (or a container's labels) state, for the agent and the manager
    alike: ``(None, None)`` when they state nothing; ``(None, why)`` when malformed, or when
    the creation time a deadline counts from is unknown; a spec that states neither a target
    nor a deadline (``total-steps`` alone) is no spec."""
    if not any(k in stated for k in ANNOTATIONS):
        return None, None
    if created is None:
        return None, "creation time unknown: quality annotations ignored"
    try:
        spec = parse(stated, created)
    except QosError as exc:
        return None, str(exc)
    return (None if spec.empty else spec), None


def total_steps(stated: Mapping[str, str]) -> int | None:
    """The steps a pod declares it runs in all (``specon.io/total-steps``), with or without a
    target or deadline; None when absent or malformed (:func:`read` reports a malformed one)."""
    raw = stated.get(TOTAL_STEPS)
    try:
        steps = int(raw.strip()) if raw is not None else 0
    except ValueError:
        return None
    return steps if 0 < steps <= _MAX_STEPS else None


_STAMP = re.compile(r"(.*T\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)")


def parse_timestamp(text: object) -> datetime | None:
    """An RFC 3339 time as container engines and the Kubernetes API write it (nanoseconds
    allowed, cut to microseconds); None when missing or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    m = _STAMP.fullmatch(text.strip())
    if m is None:
        return None
    frac = (m.group(2) or "")[:7]
    try:
        return datetime.fromisoformat(m.group(1) + frac + m.group(3).replace("Z", "+00:00"))
    except ValueError:
        return None


def _deadline(raw: str, created: datetime) -> float:
    if created.tzinfo is None:
        raise ValueError("created must be timezone-aware")
    text = raw.strip()
    try:
        return _bounded(raw, parse_duration(text))
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise QosError(
            f"{DEADLINE}: {raw!r} is neither an RFC 3339 time (2026-11-21T18:00:00Z) "
            "nor a duration (90m, 2h30m, 3600s)"
        ) from None
    if when.tzinfo is None:
        raise QosError(f"{DEADLINE}: {raw!r} has no time zone (add Z or +01:00)")
    seconds = (when - created) / timedelta(seconds=1)
    if seconds <= 0:
        raise QosError(f"{DEADLINE}: {raw!r} is not after the pod's creation")
    return _bounded(raw, seconds)


def _bounded(raw: str, seconds: float) -> float:
    if not 0 < seconds <= _MAX_DEADLINE_S:
        raise QosError(f"{DEADLINE}: {raw!r} must be more than 0 and at most 366 days away")
    return seconds
