"""A job's progress source: one followed file (progress file or container log), decoded and
parsed into loss values by the core's incremental parser (specon/logparse.py).

The loss is read from one source per job, never two (the SDK writes each record both to its
progress file and to stdout): the progress file when the agent can see it, else the log.

A user's pattern (``specon.io/loss-regex``) comes from the pod: each search is bounded
(:class:`specon.logparse.LogParser`), and all its searches in one poll together get
:data:`REGEX_BUDGET_S`; a pattern that spends its budget in :data:`REGEX_STRIKES` polls is
dropped for the job, whose lines then go to the built-in parsers only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specon.csvmetrics import CsvMetricsParser
from specon.logparse import LogParser

from .tail import STREAMS, FileTail, TailStats, decoder_for

#: The time a job's own pattern may take in one poll, over all its lines (seconds).
REGEX_BUDGET_S = 0.2
#: Polls in which a pattern spends its whole budget before it is dropped for the job.
REGEX_STRIKES = 3


@dataclass
class Reading:
    losses: list[float]
    parse_errors: int
    #: The step each loss was logged at (None where the log did not say), same length.
    steps: list[int | None] = field(default_factory=list)
    #: The job's pattern was dropped in this poll (it spent its budget too often).
    regex_dropped: bool = False


class ProgressSource:
    """Follows one file of one job. ``kind``: ``plain`` (the SDK's JSON lines), ``csv`` (a
    metrics CSV file, read from its header: specon/csvmetrics.py), ``docker-json`` or ``cri``.
    ``regex`` is a user's loss pattern (a ``(?P<loss>...)`` group). ``path_fn``
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
        regex_budget_s: float = REGEX_BUDGET_S,
        regex_strikes: int = REGEX_STRIKES,
    ) -> None:
        self.kind = kind
        self.path = path
        self._regex = regex
        self._root = root
        if kind == "csv":
            tail_bytes = None  # its header is its first line; each poll reads a bounded part
        self._tail = FileTail(path, tail_bytes=tail_bytes, root=root)
        self._decoder = decoder_for(kind)
        self.regex_budget_s = regex_budget_s
        self.regex_strikes = regex_strikes
        #: Polls in which the pattern spent its whole budget so far.
        self.strikes = 0
        self._parser = self._new_parser()
        self._errors_seen = 0
        self._path_fn = path_fn
        self.last_loss: float | None = None

    def _new_parser(self) -> LogParser | CsvMetricsParser:
        if self.kind == "csv":
            return CsvMetricsParser()
        return LogParser(regex=self._regex, regex_budget_s=self.regex_budget_s)

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
                self._parser = self._new_parser()
                self._errors_seen = 0
        truncations = self._tail.stats.truncations
        try:
            raw = self._tail.read_lines()
        except OSError:
            return Reading([], 1)
        if self._tail.stats.truncations != truncations:
            # The file starts again: what was left unfinished is not continued by it.
            self._parser.resync(STREAMS, cut=False)
        if self._tail.landed_mid_file:
            # The first records may continue a line begun before what was read (a run of
            # partial records); a plain file's first line is whole (the tail skipped to it).
            self._tail.landed_mid_file = False
            if self.kind != "plain":
                self._parser.resync(STREAMS)
        decoded = self._decoder.feed(raw)
        losses: list[float] = []
        steps: list[int | None] = []
        self._parser.new_budget()
        for stream, piece in decoded.pieces:
            # A partial record's content goes in as it comes: the parser reads each update of a
            # progress bar as soon as the next one starts, and keeps only the unfinished one.
            for rec in self._parser.feed(piece, stream):
                losses.append(rec.loss)
                steps.append(rec.step)
                if math.isfinite(rec.loss):
                    self.last_loss = rec.loss
        dropped = False
        if self._parser.budget_spent and self._parser.has_regex:
            self.strikes += 1
            if self.strikes >= self.regex_strikes:
                self._parser.drop_regex()
                self._regex = None  # and for a new file of the job's (a restart) too
                dropped = True
        return Reading(losses, decoded.errors + self._parser_errors(), steps, dropped)
