"""Reads training progress out of a metrics CSV file (PyTorch Lightning's ``CSVLogger``
``metrics.csv``), fed in lines as the agent tails it. Pure: no I/O; a bad row is counted and
skipped, never raised.

The first line is the header. A row is a record when its loss column (the first of
:data:`specon.logparse.DEFAULT_LOSS_KEYS` the header has, with a value in that row) holds a
number; the other numeric columns are metrics. Lightning's ``step`` column is the 0-based index
of the step the row was logged at, so the record's step is ``step + 1`` (completed steps, as
in the training contract); without a ``step`` column it is the row's number.

Lightning 2.0 rewrites the whole file on every flush (2.1 and later append, and rewrite it
when a new column appears): the reader starts again at the header after :meth:`resync` (the
tail saw the file truncated or rewritten) and passes on only rows after the last step it gave,
so a rewrite repeats nothing. What it keeps is the header and that step: bounded, whatever
the file's length."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable

from specon.logparse import DEFAULT_LOSS_KEYS, Counters, Record

__all__ = ["CsvMetricsParser"]

#: A header or row longer than this is dropped (counted as oversized).
MAX_LINE = 64 * 1024


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value


class CsvMetricsParser:
    """Incremental: ``feed()`` whole lines (one or more, each ending in ``\\n``), get the
    records they complete. Has the parts of :class:`specon.logparse.LogParser` the agent's
    progress source uses (``counters``, ``resync``, ``new_budget``; no user pattern)."""

    has_regex = False
    budget_spent = False

    def __init__(self, loss_keys: Iterable[str] = DEFAULT_LOSS_KEYS) -> None:
        self.counters = Counters()
        self.loss_keys = tuple(k.lower() for k in loss_keys)
        self._header: list[str] | None = None
        self._loss_columns: list[int] = []
        self._step_column: int | None = None
        self._row = 0  # rows read since the header
        self._last_step = 0  # the last step given: a rewritten file repeats nothing up to it
        self._pending = ""

    def new_budget(self) -> None:
        """Nothing to do: no user pattern runs here."""

    def drop_regex(self) -> None:
        """Nothing to do: no user pattern runs here."""

    def resync(self, streams: Iterable[str] = (), cut: bool = True) -> None:
        """The file starts again (truncated or rewritten): the next line is its header."""
        self._header, self._row, self._pending = None, 0, ""

    def flush(self) -> list[Record]:
        rest, self._pending = self._pending, ""
        out: list[Record] = []
        if rest:
            self._line(rest, out)
        return out

    def feed(self, chunk: bytes | str, stream: str = "") -> list[Record]:
        text = chunk.decode("utf-8", "replace") if isinstance(chunk, bytes | bytearray) else chunk
        data = self._pending + text
        lines = data.split("\n")
        self._pending = lines.pop()
        if len(self._pending) > MAX_LINE:
            self.counters.oversized += 1
            self._pending = ""
        out: list[Record] = []
        for line in lines:
            self._line(line.rstrip("\r"), out)
        return out

    def _line(self, line: str, out: list[Record]) -> None:
        if len(line) > MAX_LINE:
            self.counters.oversized += 1
            return
        if not line.strip():
            return
        self.counters.lines += 1
        try:
            fields = next(csv.reader([line]))
        except (csv.Error, StopIteration):
            self.counters.malformed += 1
            return
        if self._header is None:
            self._set_header(fields)
            return
        self._row += 1
        record = self._record(fields)
        if record is None:
            return
        self._last_step = record.step or self._last_step
        self.counters.records += 1
        if not math.isfinite(record.loss):
            self.counters.non_finite += 1
        out.append(record)

    def _set_header(self, fields: list[str]) -> None:
        names = [f.strip().lower() for f in fields]
        self._header = names
        self._loss_columns = [names.index(k) for k in self.loss_keys if k in names]
        self._step_column = names.index("step") if "step" in names else None
        self.counters.ignored += 1

    def _record(self, fields: list[str]) -> Record | None:
        assert self._header is not None
        if len(fields) != len(self._header):
            self.counters.malformed += 1
            return None
        loss = next((v for v in (_number(fields[i]) for i in self._loss_columns
                                 if fields[i].strip()) if v is not None), None)
        if loss is None:
            self.counters.ignored += 1  # a validation or epoch row: no training loss
            return None
        if self._step_column is not None:
            index = _number(fields[self._step_column])
            if index is None or not math.isfinite(index) or index < 0 or index != int(index):
                self.counters.malformed += 1
                return None
            step = int(index) + 1
        else:
            step = self._row
        if step <= self._last_step:
            self.counters.duplicates += 1  # read before the file was rewritten
            return None
        metrics = {}
        for name, value in zip(self._header, fields, strict=True):
            number = _number(value) if value.strip() else None
            if number is not None and name not in ("step", *self.loss_keys):
                metrics[name] = number
        return Record(step, loss, metrics, "csv")
