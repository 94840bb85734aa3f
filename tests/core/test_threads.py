"""The thread count a CPU limit is worth: floor(limit + tolerance), at least 1, at most the
cores the job sees."""

from __future__ import annotations

import math

import pytest

from specon.core.threads import MAX_THREADS, threads_for_limit


@pytest.mark.parametrize(("limit", "visible", "threads"), [
    (0.05, 8, 1), (0.5, 8, 1), (0.95, 8, 1), (1.0, 8, 1), (1.5, 8, 1), (1.89, 8, 1),
    (1.9, 8, 2), (1.95, 8, 2), (2.0, 8, 2), (3.99, 8, 4), (7.95, 8, 8), (12.0, 8, 8),
    (None, 8, 8), (math.inf, 4, 4), (None, 2.5, 2), (3.0, 0.5, 1), (None, 4096, MAX_THREADS),
    (0.0, 8, 1), (-1.0, 8, 1), (math.nan, 8, 1), (2.0, math.nan, 1),
])
def test_threads_for_limit(limit, visible, threads):
    assert threads_for_limit(limit, visible) == threads
