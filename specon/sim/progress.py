"""Progress for a log or a pipe: rich's bar draws only on a terminal, so a long run to a file
said nothing for minutes. `LineProgress` has the part of rich's `Progress` that the simulator
uses and prints one plain line to stderr at most every `every_s` seconds while it runs, with
the jobs finished in the run under way (a 20,000-job run takes minutes)."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import Any

from rich.progress import TaskID

#: Seconds between two progress lines when stderr is not a terminal.
EVERY_S = 10.0


class LineProgress:
    """``[simulate] paper-30: seed 3/10, policy default, 812/2000 jobs finished (20/90 runs
    done, 41 s)`` on stderr, every `every_s` seconds (from a timer thread, so a single long run
    is reported too); nothing for a run shorter than that."""

    def __init__(self, label: str = "simulate", every_s: float | None = None) -> None:
        self.label = label
        self.every_s = EVERY_S if every_s is None else every_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._description = ""
        self._status = ""
        self._total: float | None = None
        self._done = 0.0
        self._jobs: tuple[int, int] | None = None
        self._started = time.monotonic()

    def __enter__(self) -> LineProgress:
        self._started = time.monotonic()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="specon-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def add_task(self, description: str, total: float | None = None, **fields: Any) -> TaskID:
        with self._lock:
            self._description, self._total, self._done = description, total, 0.0
            self._status = str(fields.get("status", ""))
        return TaskID(0)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        with self._lock:
            self._done += advance

    def update(self, task_id: TaskID, **fields: Any) -> None:
        with self._lock:
            if "description" in fields:
                self._description = str(fields["description"])
            if "status" in fields:  # a new run: its jobs are counted afresh
                self._status = str(fields["status"])
                self._jobs = None

    def jobs(self, finished: int, total: int) -> None:
        """The run under way has finished `finished` of its `total` jobs."""
        with self._lock:
            self._jobs = (finished, total)

    def line(self) -> str:
        with self._lock:
            what = ": ".join(x for x in (self._description, self._status) if x)
            if self._jobs is not None:
                what += f", {self._jobs[0]}/{self._jobs[1]} jobs finished"
            total = f"/{self._total:g}" if self._total is not None else ""
            done = self._done
        elapsed = time.monotonic() - self._started
        return f"[{self.label}] {what} ({done:g}{total} runs done, {elapsed:.0f} s)"

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            print(self.line(), file=sys.stderr, flush=True)
