"""What moving a job costs it: its own measured cost when it has one, else a default.

The manager measures every completed move (the seconds from the checkpoint request to the
replacement's container started, docs/manager.md, "Move cost") and keeps a weighted mean of a
job's measurements on the job's object (``specon.io/move-cost-s``). That annotation can be
written by whoever may edit the job, so it is read as untrusted text: anything but a plain
finite number within ``[MIN_COST_S, MAX_COST_S]`` counts as no measurement, and the job is
charged the configured default (``migration_cost_s``, the conservative guess).

Pure: text and numbers in, seconds out (the simulator can charge moves the same way).
"""

from __future__ import annotations

import math

#: The fewest seconds a measured cost may say (a move is never free: it stops the job, has a
#: pod scheduled and a container started); a smaller value is not a measurement.
MIN_COST_S = 1.0
#: The most seconds a measured cost may say (a day); a larger value is not a measurement.
MAX_COST_S = 86_400.0
#: Weight of the newest measurement in the job's running mean (the previous mean keeps the
#: rest): one slow move moves the figure halfway, never all the way.
ALPHA = 0.5
#: The longest annotation value read (a number needs no more).
MAX_TEXT = 32


def parse_cost(text: object) -> float | None:
    """A measured cost from an annotation's value, or None when it is not one (absent, not a
    number, not finite, out of bounds, too long)."""
    if not isinstance(text, str) or not text or len(text) > MAX_TEXT:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value) or not MIN_COST_S <= value <= MAX_COST_S:
        return None
    return value


def job_cost(text: object, default_s: float) -> float:
    """Seconds to charge a move of a job whose ``specon.io/move-cost-s`` reads ``text`` (None
    when it has none): its measured cost if valid, else ``default_s``."""
    measured = parse_cost(text)
    return default_s if measured is None else measured


def updated_cost(text: object, measured_s: float, alpha: float = ALPHA) -> float:
    """The job's new running mean after a move that cost ``measured_s`` seconds (``text``: its
    previous value; an invalid one is ignored). Clamped to the bounds ``parse_cost`` reads
    back."""
    new = min(max(measured_s, MIN_COST_S), MAX_COST_S) if math.isfinite(measured_s) else (
        MAX_COST_S)
    old = parse_cost(text)
    return new if old is None else alpha * new + (1.0 - alpha) * old


def format_cost(seconds: float) -> str:
    """The annotation's value for ``seconds`` (what :func:`parse_cost` reads)."""
    return f"{seconds:.1f}"


def realised_gain(predicted_gain_s: float, charged_s: float, realised_s: float,
                  margin: float = 1.0) -> float:
    """The gain the planner would have predicted had it charged the move what it really cost:
    its predicted gain (net of ``margin`` x the charged cost) with the charge replaced by the
    measured one. Not the change in the job's completion time that the move caused (that
    needs the run without the move)."""
    return predicted_gain_s + margin * (charged_s - realised_s)
