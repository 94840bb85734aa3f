"""The node's per-core speed, measured by the agent (docs/manager.md, "Node speeds").

Agents report work in CPU-seconds of their own node, and a job needs more of them on a slower
node; without each node's per-core speed the manager takes every node as equally fast, and on
a cluster of mixed CPU generations the progress-aware placement packs slow nodes as if they
were fast (benchmarks/suite.py ``--manager-view --unlabelled --unmeasured``: makespan up to
+49% against the default scheduler). Where nobody labels the nodes (``specon.io/cpu-speed``),
the agent measures its own at start and reports it in every heartbeat.

The probe is what training spends its CPU on: dense float32 matrix products (a batch of small
ones: numpy's loop calls BLAS per matrix, below the size at which BLAS starts threads, so one
thread does all the work), counted per CPU-second of the calling thread. CPU time, not wall
time: the agent's own CPU limit, or a busy node's run queue, does not make the node look slow;
only what slows each core (its clock and generation, a sibling hyper-thread, cache pressure)
does. The best of a few short rounds is kept: interference only ever makes a round slower.
The agent probes again every REPROBE_S and reports the best of its last KEEP probes, so one
probe disturbed throughout (seen once in 32 on a loaded 2-core machine: 33% low;
benchmarks/speed_probe_load.py) is outvoted within REPROBE_S.

Why our own: a node's speed as training sees it has no library; a tenant cannot steer it (the
probe runs in the agent's process on the agent's data).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from specon.cpu_speed import MAX_SPEED, MIN_SPEED

log = logging.getLogger("specon_agent")

#: 64 products of 32 x 32 float32 matrices per call: 4.2 M floating-point operations.
BATCH, SIZE = 64, 32
FLOPS_PER_CALL = 2 * BATCH * SIZE**3
#: Speed 1.0: this many floating-point operations per CPU-second of one core (about what a
#: 2020s x86 server core with AVX2 FMA does on this probe; the scale only has to be the same on
#: every node of a cluster, which one probe on all of them gives).
REFERENCE_FLOPS = 100e9
#: Rounds and CPU-seconds per round (the probe costs the node ROUNDS x ROUND_S at start).
ROUNDS = 5
ROUND_S = 0.1
#: How often the agent probes again, and how many probes it takes the best of.
REPROBE_S = 600.0
KEEP = 6


def measure_cpu_speed(rounds: int = ROUNDS, round_s: float = ROUND_S,
                      cpu_clock: Callable[[], float] = time.thread_time) -> float | None:
    """The calling core's speed relative to REFERENCE_FLOPS: the best of ``rounds`` rounds of
    ``round_s`` CPU-seconds each, clamped to [MIN_SPEED, MAX_SPEED]. None when the probe
    cannot run (numpy's BLAS missing or broken): the manager then takes the node as unknown."""
    try:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((BATCH, SIZE, SIZE), dtype=np.float32)
        b = rng.standard_normal((BATCH, SIZE, SIZE), dtype=np.float32)
        out = np.empty_like(a)
        np.matmul(a, b, out=out)  # warm: first-call set-up is not timed
        best = 0.0
        for _ in range(rounds):
            calls = 0
            start = cpu_clock()
            while (spent := cpu_clock() - start) < round_s:
                np.matmul(a, b, out=out)
                calls += 1
            if spent > 0:
                best = max(best, calls * FLOPS_PER_CALL / spent)
    except Exception as exc:  # a broken BLAS must not stop the agent
        log.warning("CPU speed probe failed (%s); the node's speed is left unknown", exc)
        return None
    if best <= 0:
        return None
    return min(MAX_SPEED, max(MIN_SPEED, best / REFERENCE_FLOPS))


class SpeedProbe:
    """The agent's probes: ``probe()`` measures once and answers the best of the last KEEP;
    ``run`` probes again every ``every_s`` until ``stop`` and hands each answer to ``report``."""

    def __init__(self, measure: Callable[[], float | None] = measure_cpu_speed) -> None:
        self._measure = measure
        self._seen: deque[float] = deque(maxlen=KEEP)

    def probe(self) -> float | None:
        got = self._measure()
        if got is not None:
            self._seen.append(got)
        return max(self._seen) if self._seen else None

    def run(self, stop: threading.Event, report: Callable[[float | None], None],
            every_s: float = REPROBE_S) -> None:
        while not stop.wait(every_s):
            report(self.probe())
