"""The manager's client-side rate limit on the API server: a token bucket (client-go's
``QPS`` and ``Burst``), so that a burst of work (a migration wave, a re-list of every cache
after an outage) cannot flood the API server; its priority and fairness is the server's side."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """``burst`` requests at once, then ``qps`` a second. :meth:`take` reserves a token and
    sleeps until it is due: callers are served in the order they asked, none waits for a
    token another caller was promised, and the lock is never held while sleeping."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs qps > 0 and burst >= 1 (got {qps}, {burst})")
        self.qps, self.burst = qps, burst
        self._clock, self._sleep = clock, sleep
        self._tokens = float(burst)  # below 0: tokens already promised to waiting callers
        self._last = clock()
        self._lock = threading.Lock()
        #: Seconds callers have waited in all (the manager's metrics may read it).
        self.waited_s = 0.0

    def take(self) -> float:
        """Take one token, sleeping until it is due; the seconds slept."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst),
                               self._tokens + max(0.0, now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
            self.waited_s += wait
        if wait > 0:
            self._sleep(wait)
        return wait
