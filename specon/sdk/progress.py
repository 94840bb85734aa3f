"""Progress reporting: one JSON line per logged step, to the progress file and to stdout.

A progress file that cannot be written (a full or read-only volume) never stops the job: the
records still go to stdout, stderr says so once, and when the file can be written again a
``progress-write-failed`` event there counts the records it misses.

Stdlib only, so a training image needs nothing but this package (and its framework)."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import IO, Any

from specon import names
from specon.sdk.volume import AppendFile, warn, why

#: Environment variable naming the JSON-lines progress file (on the shared volume).
ENV_PROGRESS_FILE = names.ENV_PROGRESS_FILE
#: Version of the record format; every record carries it under the key "specon".
RECORD_VERSION = 1


def _number(value: float) -> float | str:
    # Strict JSON has no NaN or Infinity: they travel as the strings "nan", "inf", "-inf".
    value = float(value)
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "nan"
    return "inf" if value > 0 else "-inf"


def _clean(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    try:
        return _number(value)
    except (TypeError, ValueError):
        return str(value)


class Reporter:
    """Writes progress and event records; one per process is enough (see `report`)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, stdout: IO[str] | None = None):
        if path is None:
            path = os.environ.get(ENV_PROGRESS_FILE) or None
        self.path = Path(path) if path else None
        self._stdout = stdout
        self._file: AppendFile | None = AppendFile(self.path) if self.path is not None else None
        self._last_step = 0
        #: Records the progress file misses since its writes began to fail, and the first
        #: failure (reported in the file once it can be written again).
        self._lost = 0
        self._lost_since = 0.0
        self._lost_reason = ""

    def _out(self) -> IO[str]:
        return self._stdout if self._stdout is not None else sys.stdout

    def _print(self, line: str) -> None:
        out = self._out()
        # A Rich live display in a terminal (Lightning's RichProgressBar, with a tty or
        # FORCE_COLOR) swaps sys.stdout for a proxy that re-prints each line through its
        # console, folded at the console's width: a record would reach the log in pieces that
        # no reader parses. Write to the file beneath it instead, after a carriage return so
        # that the bar's unfinished line ends (log readers end a segment at "\r").
        under = getattr(out, "rich_proxied_file", None)
        if under is not None:
            under.write("\r" + line + "\n")
            under.flush()
            return
        out.write(line + "\n")
        out.flush()

    def emit(self, record: dict[str, Any]) -> dict[str, Any]:
        """Write one record (already shaped) to the progress file and stdout."""
        line = json.dumps(record, separators=(",", ":"), allow_nan=False)
        if self._file is not None:
            self._to_file(line)
        self._print(line)
        return record

    def _to_file(self, line: str) -> None:
        assert self._file is not None
        gap = json.dumps(self._gap(), separators=(",", ":")) if self._lost else None
        try:
            # The gap's event and the record in one write: both there, or neither.
            self._file.append(((gap + "\n") if gap else "").encode() + line.encode() + b"\n")
        except OSError as exc:
            if not self._lost:
                self._lost_since, self._lost_reason = time.time(), why(exc)
                warn(f"cannot write the progress file {self.path} ({why(exc)}); records go to "
                     "stdout only until it can be written again, and the job goes on")
            self._lost += 1
            return
        if gap is not None:
            self._print(gap)
            warn(f"the progress file {self.path} is written again ({self._lost} records "
                 "missing there; stdout has them)")
            self._lost = 0

    def _gap(self) -> dict[str, Any]:
        return {"specon": RECORD_VERSION, "event": "progress-write-failed",
                "time": round(time.time(), 6), "lost": self._lost,
                "since": round(self._lost_since, 6), "reason": self._lost_reason}

    def report(self, loss: float, step: int | None = None, **metrics: Any) -> dict[str, Any]:
        if step is None:
            step = self._last_step + 1
        self._last_step = int(step)
        record: dict[str, Any] = {
            "specon": RECORD_VERSION,
            "event": "progress",
            "step": int(step),
            "loss": _number(loss),
            "time": round(time.time(), 6),
        }
        if metrics:
            record["metrics"] = {str(k): _clean(v) for k, v in metrics.items()}
        return self.emit(record)

    def event(self, event: str, **fields: Any) -> dict[str, Any]:
        record: dict[str, Any] = {
            "specon": RECORD_VERSION,
            "event": event,
            "time": round(time.time(), 6),
        }
        record.update({k: _clean(v) if not isinstance(v, list | dict) else v
                       for k, v in fields.items()})
        return self.emit(record)

    def sync(self) -> None:
        """Fsync the progress file (before the process stops); a failure is only reported."""
        if self._file is not None:
            try:
                self._file.sync()
            except OSError as exc:
                warn(f"cannot sync the progress file {self.path} ({why(exc)})")
        self._out().flush()

    def close(self) -> None:
        if self._file is not None:
            self.sync()
            self._file.close()


_default: Reporter | None = None


def default_reporter() -> Reporter:
    """The process-wide reporter, configured from the environment on first use."""
    global _default
    if _default is None:
        _default = Reporter()
    return _default


def report(loss: float, step: int | None = None, **metrics: Any) -> dict[str, Any]:
    """Report the loss after `step` completed iterations (1-based; default: previous + 1).

    Appends one JSON line to $SPECON_PROGRESS_FILE (when set) and prints the same line to
    stdout. Extra keyword arguments are metrics (numbers or short strings)."""
    return default_reporter().report(loss, step=step, **metrics)
