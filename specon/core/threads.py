"""How many threads a job should run under a CPU limit: the count the agent writes into the
job's thread hint (docs/training-contract.md §8); the simulator's node model may use the same
rule for jobs that follow the hint.
"""

from __future__ import annotations

import math

#: A limit a little under a whole core still gets that core's thread: a limit of 1.95 cores
#: runs 2 threads, 1.5 runs 1. Throttling one thread too many costs 6-21% of throughput on a
#: real node (quota measurements in docs/examples.md); running one thread too few at x.9
#: cores loses at most a tenth of a core.
TOLERANCE_CORES = 0.1
#: The most threads a hint may name (the SDK rejects more).
MAX_THREADS = 1024


def threads_for_limit(limit_cores: float | None, visible_cores: float) -> int:
    """Threads for a job held to ``limit_cores`` (None: unlimited) on a machine where it sees
    ``visible_cores`` CPUs: max(1, floor(limit + tolerance)), never more than it sees."""
    if not visible_cores >= 1 or math.isnan(visible_cores):
        visible_cores = 1.0
    cap = min(MAX_THREADS, math.floor(visible_cores))
    if limit_cores is None or math.isinf(limit_cores):
        return max(1, cap)
    if math.isnan(limit_cores) or limit_cores <= 0:
        return 1
    return max(1, min(cap, math.floor(limit_cores + TOLERANCE_CORES)))
