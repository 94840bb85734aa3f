"""Reads training progress (step, loss, metrics) out of container logs, fed in chunks as the
agent tails them. Pure: no I/O, and no clock but the one that bounds a user's pattern; junk is
counted and skipped, never raised."""

from __future__ import annotations

import codecs
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import regex as _user_re  # a user's pattern runs here: it takes a per-search timeout

__all__ = ["Counters", "LogParser", "Record", "parse_text"]

_NUMBER = r"[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)"
# key = value, key: value, "key": value, 'key': value, key=tensor(value, ...)
_PAIR = re.compile(
    r"(?<![\w.\-/])['\"]?(?P<key>[A-Za-z_][\w./\-]*)['\"]?\s*[=:]\s*"
    r"(?:tensor\(|np\.float(?:16|32|64)\()?['\"]?(?P<value>" + _NUMBER + r")['\"]?(?![\w.])",
    re.IGNORECASE,
)
# "Step 120", "iter 120" without a separator
_STEP_WORD = re.compile(r"\b(?:global[_ ]step|step|iter(?:ation)?)\s+(\d+)\b", re.IGNORECASE)
# a progress counter "45/100" (Keras bars, tqdm bars), not a date or a path
_COUNTER = re.compile(r"(?<![\w/.])(\d+)/(\d+)(?![\w/])")
# Keras: "Epoch 3/10" on its own line (1-based)
_KERAS_EPOCH = re.compile(r"^\s*Epoch\s+(\d+)/(\d+)\s*$")
# tqdm bars of PyTorch Lightning: "Epoch 3:  45%|..." (0-based)
_BAR_EPOCH = re.compile(r"\bEpoch\s+(\d+)\s*:")
# a tqdm bar's counter: " 45%|████▌     | 950/2107 [..." (its n is whole once "/" follows it)
_TQDM_N = re.compile(r"%\|[^|\n]{0,200}\|\s*(\d+)/")
# what ends a segment: a line end, a carriage return, backspaces (bars redrawn in place)
_SEPARATOR = re.compile(r"\r\n|[\n\r\x08]+")
# CSI and OSC escape sequences (colours, cursor moves, hyperlinks)
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

#: Keys that name the training loss (compared lower-case). Validation losses are metrics.
DEFAULT_LOSS_KEYS = ("loss", "train_loss", "training_loss", "loss_step", "train_loss_step",
                     "train/loss", "trainer/loss")
_STEP_KEYS = ("step", "global_step", "iteration", "iter", "it", "trainer/global_step")
# A Hugging Face Trainer's end-of-run summary: its train_loss is the mean over the whole run.
_SUMMARY_KEYS = ("train_runtime",)
_EMPTY_BAR = -1


@dataclass(frozen=True)
class Record:
    """One loss report: `step` when the log says it (else None), `loss` may be nan/inf."""

    step: int | None
    loss: float
    metrics: Mapping[str, float] = field(default_factory=dict)
    format: str = "text"


@dataclass
class _Stream:
    """What the parser keeps of one output stream between chunks: the unfinished segment
    (at most ``max_line`` characters), a split UTF-8 character, and the last tqdm bar's
    counter in the current line."""

    decoder: codecs.IncrementalDecoder
    pending: str = ""
    #: Drop everything up to the next separator: the rest of a segment that was too long, or
    #: the first (cut) segment after the reader started inside a line.
    skip: bool = False
    line_bar: int | None = None


@dataclass
class Counters:
    """What the parser has seen so far."""

    lines: int = 0  # line or progress-bar segments examined
    records: int = 0
    ignored: int = 0  # text without a loss (ordinary log lines)
    malformed: int = 0  # looked like a record (ours, or a dict with a loss) and was not one
    non_finite: int = 0  # records whose loss is nan or inf
    oversized: int = 0  # segments longer than the limit, dropped
    regex_timeouts: int = 0  # lines the user's pattern gave up on (backtracking past the bound)
    regex_skipped: int = 0  # lines the user's pattern was not tried on: its budget was spent
    duplicates: int = 0  # a progress bar redrawn with the same values


def _float(text: str) -> float:
    low = text.lower().lstrip("+")
    if low in ("inf", "infinity"):
        return math.inf
    if low in ("-inf", "-infinity"):
        return -math.inf
    return float(low)


class LogParser:
    """Incremental parser: `feed()` chunks of bytes or text, get the records completed so far.

    Lines end at "\\n"; "\\r" and backspaces end a segment too (progress bars redraw in
    place), so every update of a bar is parsed as soon as the next one starts, however long
    its line grows. A trailing partial segment waits for more input, or for `flush()`; one
    longer than ``max_line`` is dropped (counted) up to its end. Each output stream (``stream``
    of :meth:`feed`: a container's stdout and stderr interleave in its log) has its own
    unfinished segment."""

    def __init__(
        self,
        regex: str | None = None,
        loss_keys: Iterable[str] = DEFAULT_LOSS_KEYS,
        max_line: int = 64 * 1024,
        regex_timeout_s: float = 0.05,
        regex_budget_s: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.counters = Counters()
        self.loss_keys = tuple(k.lower() for k in loss_keys)
        self.max_line = max_line
        #: A user's pattern comes from a pod annotation: one that backtracks catastrophically
        #: must not stall the agent's loop, so every search is bounded in time and a line it
        #: gives up on is counted and skipped.
        self.regex_timeout_s = regex_timeout_s
        #: And all its searches together, between two calls of :meth:`new_budget` (the agent:
        #: one poll), take at most about ``regex_budget_s`` (None: no such bound): once it is
        #: spent, the remaining lines go to the built-in parsers only.
        self.regex_budget_s = regex_budget_s
        self._budget_left = regex_budget_s
        #: Whether the user's pattern spent its budget since the last :meth:`new_budget`.
        self.budget_spent = False
        self._clock = clock
        try:
            self._regex = _user_re.compile(regex) if regex else None
        except (_user_re.error, ValueError, TypeError) as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        if self._regex is not None and "loss" not in self._regex.groupindex:
            raise ValueError("the regex needs a named group (?P<loss>...)")
        self._streams: dict[str, _Stream] = {}
        self._state = self._stream("")  # the stream of the segment being parsed
        #: Hugging Face Trainer: steps per epoch, from a dict whose line also held the bar.
        self._per_epoch: float | None = None
        self._epoch: tuple[int, int] | None = None  # (epoch, 0 or 1 for 0-/1-based)
        self._last: Record | None = None

    @property
    def has_regex(self) -> bool:
        return self._regex is not None

    def new_budget(self) -> None:
        """Give the user's pattern its full time budget again (a new poll)."""
        self._budget_left = self.regex_budget_s
        self.budget_spent = False

    def drop_regex(self) -> None:
        """Stop using the user's pattern: from now on the built-in parsers read every line."""
        self._regex = None

    # -- feeding ----------------------------------------------------------------------
    def _stream(self, name: str) -> _Stream:
        state = self._streams.get(name)
        if state is None:
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            state = self._streams[name] = _Stream(decoder)
        return state

    def feed(self, chunk: bytes | str, stream: str = "") -> list[Record]:
        """Parse a chunk of ``stream``'s output (any cut: inside a line, a number or a UTF-8
        character) and return the records it completed."""
        state = self._stream(stream)
        text = state.decoder.decode(chunk) if isinstance(chunk, bytes | bytearray) else chunk
        data = state.pending + text
        out: list[Record] = []
        start = 0
        for match in _SEPARATOR.finditer(data):
            if state.skip:
                state.skip = False
            else:
                self._segment(data[start:match.start()], out, state)
            if "\n" in match.group():
                state.line_bar = None
            start = match.end()
        state.pending = data[start:]
        if len(state.pending) > self.max_line:
            if not state.skip:
                self.counters.oversized += 1
            state.skip = True
            state.pending = ""
        return out

    def resync(self, streams: Iterable[str], cut: bool = True) -> None:
        """Forget the unfinished segment of these streams: their next chunks do not continue
        it (the log was truncated and starts again). ``cut``: the next chunks may start
        inside a segment (the reader began inside a line): drop each one's text up to its
        first separator, never parse a cut update (a counter "950/2107" cut to "50/2107" is
        a wrong step)."""
        for name in streams:
            state = self._stream(name)
            state.pending, state.skip, state.line_bar = "", cut, None

    def flush(self) -> list[Record]:
        """End of the stream: parse what is left (a last line without its newline)."""
        out: list[Record] = []
        for state in self._streams.values():
            rest = state.pending + state.decoder.decode(b"", final=True)
            state.pending = ""
            if state.skip:
                state.skip = False
            else:
                self._segment(rest, out, state)
        return out

    # -- one segment --------------------------------------------------------------------
    def _segment(self, raw: str, out: list[Record], state: _Stream) -> None:
        if len(raw) > self.max_line:
            self.counters.oversized += 1
            return
        text = _CONTROL.sub("", _ANSI.sub("", raw)).strip()
        if not text:
            return
        self.counters.lines += 1
        self._state = state
        record = self._parse(text)
        bar = _TQDM_N.search(text)
        if bar:
            state.line_bar = int(bar.group(1))
        if record is None:
            return
        if record == self._last:
            self.counters.duplicates += 1
            return
        self._last = record
        self.counters.records += 1
        if not math.isfinite(record.loss):
            self.counters.non_finite += 1
        out.append(record)

    def _parse(self, text: str) -> Record | None:
        if self._regex is not None:
            found = self._user(text)
            if found is not None:
                return found
        keras_epoch = _KERAS_EPOCH.match(text)
        if keras_epoch:
            self._epoch = (int(keras_epoch.group(1)), 1)
            self.counters.ignored += 1
            return None
        if text.startswith("{") and '"specon"' in text:
            return self._ours(text)
        brace = text.find("{")
        if brace > 0:
            # tqdm.write() after a bar that was never ended (Hugging Face Trainer): the bar's
            # counter is the dict's step, not its own record
            bar = _TQDM_N.search(text, 0, brace)
            if bar:
                self._state.line_bar = int(bar.group(1))
            found = self._pairs(text[brace:], count=False)
            if found is not None:
                return found
        return self._pairs(text)

    def _user(self, text: str) -> Record | None:
        assert self._regex is not None
        timeout = self.regex_timeout_s
        left = self._budget_left
        if left is not None:
            if left <= 0:
                self.counters.regex_skipped += 1
                return None
            timeout = min(timeout, left)
        start = self._clock()
        try:
            match = self._regex.search(text, timeout=timeout)
        except TimeoutError:
            self.counters.regex_timeouts += 1
            return None
        finally:
            if left is not None:
                self._budget_left = left - (self._clock() - start)
                if self._budget_left <= 0:
                    self.budget_spent = True
        if match is None:
            return None
        groups = match.groupdict()
        try:
            loss = _float(groups.pop("loss") or "")
            step_text = groups.pop("step", None)
            step = int(step_text) if step_text else None
            if step is not None and step < 0:
                step = None
            metrics = {k: _float(v) for k, v in groups.items() if v is not None}
        except ValueError:
            self.counters.malformed += 1
            return None
        return Record(step, loss, metrics, "regex")

    def _ours(self, text: str) -> Record | None:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            # a torn line of ours (killed mid-write): a number cut short is no loss
            self.counters.malformed += 1
            return None
        if not isinstance(value, dict) or value.get("event", "progress") != "progress":
            self.counters.ignored += 1  # our checkpoint/resume/stop events
            return None
        try:
            loss = _float(str(value["loss"]))
            step = value.get("step")
            step = int(step) if step is not None else None
            if step is not None and step < 0:
                step = None
            raw = value.get("metrics") or {}
            metrics = {str(k): _float(str(v)) for k, v in raw.items()
                       if isinstance(v, int | float | str) and not isinstance(v, bool)}
        except (KeyError, ValueError, TypeError, AttributeError, OverflowError):
            self.counters.malformed += 1
            return None
        return Record(step, loss, metrics, "specon")

    def _pairs(self, text: str, count: bool = True) -> Record | None:
        pairs: dict[str, float] = {}
        for match in _PAIR.finditer(text):
            key = match.group("key")
            if key not in pairs:
                try:
                    pairs[key] = _float(match.group("value"))
                except (ValueError, OverflowError):
                    continue
        lower = {k.lower(): k for k in pairs}
        loss_key = next((lower[k] for k in self.loss_keys if k in lower), None)
        if loss_key is None or any(k in lower for k in _SUMMARY_KEYS):
            self.counters.ignored += count
            return None
        loss = pairs.pop(loss_key)
        step = self._step(text, pairs, lower)
        if step == _EMPTY_BAR:
            self.counters.ignored += count
            return None
        if text.startswith("{"):
            fmt = "dict"
            if step is None and "epoch" in lower:
                step = self._trainer_step(pairs[lower["epoch"]])
        elif "it/s" in text or "s/it" in text:
            fmt = "tqdm"
        elif " - " in text and _COUNTER.match(text):
            fmt = "keras"
        else:
            fmt = "text"
        return Record(step, loss, pairs, fmt)

    def _trainer_step(self, epoch: float) -> int | None:
        """The step of a Hugging Face Trainer dict (it has its epoch, a fraction, and no step):
        the counter of the tqdm bar drawn on the same line just before it (``tqdm.write``
        clears the bar, prints the dict and redraws the bar), else the epoch times the steps
        per epoch seen on an earlier such line, else unknown."""
        bar = self._state.line_bar
        if bar is not None and bar > 0:
            if math.isfinite(epoch) and epoch > 0:
                self._per_epoch = bar / epoch
            return bar
        if self._per_epoch is not None and math.isfinite(epoch) and 0 < epoch < 1e9:
            return round(epoch * self._per_epoch)
        return None

    def _step(self, text: str, pairs: dict[str, float], lower: Mapping[str, str]) -> int | None:
        for key in _STEP_KEYS:
            if key in lower:
                value = pairs.pop(lower[key])
                if math.isfinite(value) and value >= 0 and value == int(value):
                    return int(value)
        word = _STEP_WORD.search(text)
        if word:
            return int(word.group(1))
        counter = _COUNTER.search(text)
        if counter is None:
            return None
        done, total = int(counter.group(1)), int(counter.group(2))
        if total <= 0 or done > total:
            return None
        if done == 0:
            # a bar just (re)drawn at 0/N repeats the last loss at no step (Lightning resets
            # its bar when an epoch ends)
            return _EMPTY_BAR
        bar_epoch = _BAR_EPOCH.search(text)
        if bar_epoch:  # Lightning: 0-based epoch in the bar itself
            return int(bar_epoch.group(1)) * total + done
        if self._epoch is not None:  # Keras: the last "Epoch e/E" line, 1-based
            epoch, base = self._epoch
            return (epoch - base) * total + done
        return done


def parse_text(text: str | bytes, regex: str | None = None) -> tuple[list[Record], Counters]:
    """Parse a whole log at once (tests, offline use)."""
    parser = LogParser(regex=regex)
    records = parser.feed(text)
    records.extend(parser.flush())
    return records, parser.counters
