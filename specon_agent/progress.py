"""A job's progress source: one followed file (progress file or container log), decoded and
parsed into loss values by the core's incremental parser (specon/logparse.py).

The loss is read from one source per job, never two (the SDK writes each record both to its
progress file and to stdout): the progress file when the agent can see it, else the log.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specon.logparse import LogParser

from .tail import FileTail, TailStats, decoder_for


@dataclass
class Reading:
    losses: list[float]
    parse_errors: int
    #: The step each loss was logged at (None where the log did not say), same length.
    steps: list[int | None] = field(default_factory=list)


class ProgressSource:
    """Follows one file of one job. ``kind``: ``plain`` (the SDK's JSON lines), ``docker-json``
    or ``cri``. ``regex`` is a user's loss pattern (a ``(?P<loss>...)`` group). ``path_fn``
    (when given) is asked on every poll which file is current (a restarted pod container writes
    a new CRI log)."""

    def __init__(
        self,
        path: Path,
        kind: str,
        tail_bytes: int | None = 1 << 20,
        regex: str | None = None,
        path_fn: Callable[[], Path | None] | None = None,
        root: Path | None = None,
    ) -> None:
        self.kind = kind
        self.path = path
        self._regex = regex
        self._root = root
        self._tail = FileTail(path, tail_bytes=tail_bytes, root=root)
        self._decoder = decoder_for(kind)
        self._parser = LogParser(regex=regex)
        self._errors_seen = 0
        self._path_fn = path_fn
        self.last_loss: float | None = None

    def close(self) -> None:
        self._tail.close()

    @property
    def stats(self) -> TailStats:
        return self._tail.stats

    def _parser_errors(self) -> int:
        c = self._parser.counters
        total = c.malformed + c.oversized + c.regex_timeouts
        new, self._errors_seen = total - self._errors_seen, total
        return new

    def poll(self) -> Reading:
        if self._path_fn is not None:
            current = self._path_fn()
            if current is not None and current != self.path:
                # A new file (the container restarted): start it afresh, from its beginning.
                self._tail.close()
                self.path = current
                self._tail = FileTail(current, tail_bytes=None, stats=self._tail.stats,
                                      root=self._root)
                self._decoder = decoder_for(self.kind)
                self._parser = LogParser(regex=self._regex)
                self._errors_seen = 0
        try:
            raw = self._tail.read_lines()
        except OSError:
            return Reading([], 1)
        decoded = self._decoder.feed(raw)
        losses: list[float] = []
        steps: list[int | None] = []
        for line in decoded.lines:
            for rec in self._parser.feed(line + "\n"):
                losses.append(rec.loss)
                steps.append(rec.step)
                if math.isfinite(rec.loss):
                    self.last_loss = rec.loss
        return Reading(losses, decoded.errors + self._parser_errors(), steps)
