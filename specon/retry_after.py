"""How long to wait before sending a request again that the API server answered 429 (Too Many
Requests: its priority and fairness shedding load): the manager's client and the agent's resize
actuator both wait this way, as client-go does, a bounded number of times."""

from __future__ import annotations

#: A 429 is retried this many times, each after its Retry-After.
RETRY_429 = 3
#: The longest one wait, whatever Retry-After asks.
RETRY_AFTER_MAX_S = 10.0


def retry_after_s(header: str | None, cap: float | None = None) -> float:
    """Seconds to wait for a 429 with this ``Retry-After`` header: its whole seconds (1 when
    absent, a date, or not a number), at most :data:`RETRY_AFTER_MAX_S` and at most ``cap``
    (a caller's own deadline), never below 0."""
    try:
        wait = float(header if header is not None else "1")
    except ValueError:
        wait = 1.0
    if wait != wait:  # NaN
        wait = 1.0
    limit = RETRY_AFTER_MAX_S if cap is None else min(RETRY_AFTER_MAX_S, cap)
    return max(0.0, min(wait, limit))
