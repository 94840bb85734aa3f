"""How many TokenReviews the manager sends, whoever asks: at most ``concurrency`` at a time and
at most ``per_s`` a second on average (a token bucket holding ``burst``); and one at a time per
token (the others asking about the same token wait for its answer, then read it from the
cache).

Every path that reviews a token goes through :class:`specon_manager.identity.TokenReviewer`,
which holds one of these: the heartbeat, the heartbeat stream, the reallocation request, and
the authentication that precedes any agent body (docs/security.md). Before, ``/v1/reallocate``
reviewed on FastAPI's thread pool, beside the limiter of the other paths: 10,000 crafted
tokens cost 10,000 TokenReviews, as fast as 40 threads could send them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class ReviewLimiter:
    """Concurrency, rate and single-flight limits for TokenReviews (thread-safe)."""

    def __init__(self, concurrency: int = 4, per_s: float = 50.0, burst: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if concurrency < 1 or per_s <= 0:
            raise ValueError("concurrency and per_s must be positive")
        self.concurrency = concurrency
        self.per_s = per_s
        self.burst = burst if burst is not None else max(1.0, 2 * per_s)
        self._clock = clock
        self._tokens = self.burst
        self._at = clock()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(concurrency)
        self._inflight: dict[str, threading.Event] = {}

    def allow(self) -> bool:
        """Take one review from the bucket; False: over the ceiling, do not review now."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_s)
            self._at = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True

    @contextmanager
    def slot(self) -> Iterator[None]:
        """One of the ``concurrency`` reviews that may run at once (waits for one)."""
        with self._slots:
            yield

    @contextmanager
    def single(self, key: str, wait_s: float) -> Iterator[bool]:
        """True: this caller reviews ``key`` (the others wait until it is done); False: another
        caller was reviewing it, and has finished (or ``wait_s`` passed)."""
        with self._lock:
            running = self._inflight.get(key)
            if running is None:
                mine = self._inflight[key] = threading.Event()
        if running is not None:
            running.wait(wait_s)
            yield False
            return
        try:
            yield True
        finally:
            with self._lock:
                del self._inflight[key]
            mine.set()
