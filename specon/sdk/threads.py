"""The thread hint: the agent writes ``threads.json`` beside the checkpoint request when it
changes the job's CPU limit; the job reads it between steps and runs that many threads, so a
throttled job does not pay the quota penalty (docs/training-contract.md §8).

The file comes from outside the job and is validated as hostile: at most
:data:`MAX_HINT_BYTES`, a JSON object whose ``threads`` is an integer in 1..:data:`MAX_THREADS`.
A bad hint is ignored with one message (stderr and a ``threads-rejected`` event) per distinct
content; the job keeps its thread count and never fails because of it. Checking costs one
``stat`` per step: the file is read again only when its mtime, size or inode change.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specon import names
from specon.sdk.progress import Reporter, default_reporter

#: The hint file, in the job's checkpoint directory: {"threads": N, ...} (other keys ignored).
THREADS_FILE = names.THREADS_FILE
#: A hint larger than this is rejected unread.
MAX_HINT_BYTES = 4096
MAX_THREADS = 1024


class HintError(ValueError):
    """The hint file's content is not a valid hint; the message says why."""


def parse_hint(data: bytes) -> int:
    """The thread count a hint file's bytes name, or :class:`HintError`."""
    if len(data) > MAX_HINT_BYTES:
        raise HintError(f"larger than {MAX_HINT_BYTES} bytes")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HintError(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise HintError(f"not a JSON object (a {type(value).__name__})")
    if "threads" not in value:
        raise HintError('no "threads" field')
    threads = value["threads"]
    # bool is an int in Python: true is not a thread count.
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise HintError(f'"threads" must be an integer, got {json.dumps(threads)[:40]}')
    if not 1 <= threads <= MAX_THREADS:
        raise HintError(f'"threads" must be within 1..{MAX_THREADS}, got {threads}')
    return threads


def visible_cores() -> int:
    """The CPUs this process may run on (a cpuset or affinity mask shows fewer)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class ThreadHint:
    """Follows ``threads.json`` in ``directory``: :meth:`poll` between steps returns the new
    thread count when the hint changed (capped by the cores this process sees) and calls
    ``apply`` with it; :attr:`threads` is the count in force (None until a hint arrives)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        apply: Callable[[int], None] | None = None,
        *,
        reporter: Reporter | None = None,
        cores: Callable[[], int] = visible_cores,
    ) -> None:
        self.path = Path(directory) / THREADS_FILE
        self.apply = apply
        self._reporter = reporter
        self._cores = cores
        self._seen: tuple[int, int, int] | None = None
        self.threads: int | None = None

    @property
    def reporter(self) -> Reporter:
        return self._reporter if self._reporter is not None else default_reporter()

    def poll(self, step: int | None = None) -> int | None:
        """Read the hint if it changed; the new thread count when it was applied, else None."""
        try:
            st = os.stat(self.path)
        except OSError:
            self._seen = None  # removed: a new file later is read again
            return None
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key == self._seen:
            return None
        self._seen = key
        try:
            threads = parse_hint(self._read(st.st_size))
        except HintError as exc:
            self._reject(str(exc), step)
            return None
        except OSError as exc:
            # Gone between stat and open, or unreadable: look again when it changes.
            self._seen = None if isinstance(exc, FileNotFoundError) else key
            if not isinstance(exc, FileNotFoundError):
                self._reject(f"unreadable ({type(exc).__name__})", step)
            return None
        threads = min(threads, self._cores())
        if threads == self.threads:
            return None
        self.threads = threads
        if self.apply is not None:
            try:
                self.apply(threads)
            except Exception as exc:  # a hint must never stop the job
                self._reject(f"could not apply {threads} threads ({type(exc).__name__}: {exc})",
                             step)
                return None
        fields: dict[str, Any] = {"threads": threads}
        if step is not None:
            fields["step"] = step
        self.reporter.event("threads", **fields)
        return threads

    def _read(self, size: int) -> bytes:
        if size > MAX_HINT_BYTES:
            return b"\0" * (MAX_HINT_BYTES + 1)  # rejected by size, never read
        # O_NONBLOCK: a FIFO put there does not block the training loop.
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        try:
            return os.read(fd, MAX_HINT_BYTES + 1)
        finally:
            os.close(fd)

    def _reject(self, reason: str, step: int | None) -> None:
        print(f"specon: ignoring thread hint {self.path}: {reason}", file=sys.stderr, flush=True)
        fields: dict[str, Any] = {"file": str(self.path), "reason": reason}
        if step is not None:
            fields["step"] = step
        self.reporter.event("threads-rejected", **fields)
