"""The oracle: a proven lower bound on the average completion time any policy can reach.

Every policy runs in the simulator's node model (specon/core/speedup.py, docs/node-model.md).
The oracle relaxes that model until the best schedule can be computed exactly, so that its
average completion is at most every policy's (a property test checks it on random workloads):

* **Pooled, free migration.** The cluster is one pool of ``sum(cpus * speed)`` speed-weighted
  cores; a job may use any part of it at any moment, across workers, and moving costs nothing.
* **Best thread count, no interference.** A job using ``y`` speed-weighted cores runs at
  ``s_max * H(y / s_max)`` where ``H`` is the concave majorant of its speed-up table
  (:meth:`Curve.hull`) and ``s_max`` the fastest worker's speed: no real placement does better,
  because ``s * H(y / s)`` grows with ``s`` for a concave ``H`` through the origin. The
  oversubscription and interference factors, both at most 1, are dropped.
* **Time-indexed linear programme.** Time is cut into slots; ``x[j, t]`` iterations of job j
  run in slot t, using ``y[j, t]`` cores on average. For every schedule of the real model,
  ``C_j >= M_j + W_j / (2 m_j)`` (``M_j``: the mean time at which its ``W_j`` iterations run,
  ``m_j``: its top speed) and ``C_j >= r_j + W_j / m_j``; the programme minimises the sum of
  the right-hand sides, counting each slot's work at the slot's start (earlier than it really
  runs) and the work after the horizon at the horizon. Its optimum is therefore at most the
  sum of completion times of any schedule. It is solved with the cores substituted out: a
  job's work in a slot is cut into the pieces of its concave limit, each with the cores it
  needs per iteration, so the programme has one row per job and per slot (before 2026-11-26 a
  row per job, slot and piece: 400 jobs took 242 s, now 10 s, the same optimum).

The per-job figures are that bound's shares (their sum is the bound); only the average
completion is a bound on a sum, so the makespan and the percentiles are left blank.

**Time to 90%.** A job reaches 90% of its loss reduction at the iteration where its smoothed
loss first gets there (:func:`specon.sim.milestones.ninety_iteration`), and no schedule runs it
faster than its top speed on the best worker, alone: ``submit + that iteration / top`` is a
lower bound on each job's time to 90%, so their mean bounds every policy's mean (the same jobs
reach it under every policy: whether they do depends only on where they stop). It is the bound
of ``avg_time_to_90_s``, not a schedule: no single schedule need reach it for every job at once.

It knows every job's remaining work: it is the headroom line, never a competitor.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from specon.core.speedup import Curve
from specon.sim.milestones import milestone_iteration, ninety_iteration
from specon.sim.model import JobResult, RunResult
from specon.workload.models import JobSpec, Workload

#: Slots over the horizon: more is tighter (and slower).
SLOTS = 240
#: Above this many jobs the programme is too large; a looser bound in O(n log n) is used.
LP_MAX_JOBS = 400


@dataclass(frozen=True, slots=True)
class _Job:
    spec: JobSpec
    release: float
    work: float  # iterations to run
    cost: float  # seconds per iteration on one speed-1 core
    segments: tuple[tuple[float, float], ...]  # speed <= a * u + b on the hull, per piece
    top: float  # iterations per second at best (any real worker)
    u_top: float  # cores (on the fastest worker) at which the hull reaches its top
    slope: float  # the hull's first slope: speed per core at best


def _end_iteration(spec: JobSpec, workload: Workload) -> float:
    prof = workload.profiles[spec.profile]
    end = float(prof.iterations)
    if spec.stop_at_target and spec.target_loss is not None:
        reach = milestone_iteration(prof, spec.target_loss)
        if reach is not None:
            end = min(end, reach)
    return end


def _jobs(workload: Workload) -> tuple[list[_Job], float, float]:
    s_max = max(w.speed for w in workload.cluster.workers)
    pool = sum(w.cpus * w.speed for w in workload.cluster.workers)
    out = []
    for spec in workload.jobs:
        prof = workload.profiles[spec.profile]
        curve = Curve.of([(float(k), v) for k, v in prof.speedup.items()])
        cost = prof.cpu_seconds_per_iteration * spec.work_scale
        hull = curve.hull()
        segs = []
        for (x0, y0), (x1, y1) in itertools.pairwise(hull):
            a = (y1 - y0) / (x1 - x0)
            segs.append((a, y0 - a * x0))
        segs.append((0.0, hull[-1][1]))  # flat beyond the top
        top = max(w.speed * curve.envelope(w.cpus) for w in workload.cluster.workers) / cost
        out.append(_Job(spec, spec.submit_s, _end_iteration(spec, workload), cost,
                        tuple(segs), top, hull[-1][0], segs[0][0]))
    return out, s_max, pool


def _horizon(jobs: list[_Job], pool: float, s_max: float) -> float:
    """When a simple feasible relaxed schedule ends: shortest remaining first, each job at its
    top speed while the pool lasts. Only the slot grid depends on it, never the bound's
    validity (work after the horizon is counted at the horizon)."""
    pending = sorted(jobs, key=lambda j: j.release)
    left = {id(j): j.work for j in jobs}
    active: list[_Job] = []
    now = 0.0
    i = 0

    while i < len(pending) or active:
        while i < len(pending) and pending[i].release <= now + 1e-12:
            active.append(pending[i])
            i += 1
        if not active:
            now = pending[i].release
            continue
        active.sort(key=lambda j: left[id(j)] / j.top)
        free = pool
        rates = {}
        for j in active:
            y = min(j.u_top * s_max, free)
            free -= y
            u = y / s_max
            rates[id(j)] = min(a * u + b for a, b in j.segments) * s_max / j.cost
        nxt = pending[i].release if i < len(pending) else math.inf
        for j in active:
            r = rates[id(j)]
            if r > 0:
                nxt = min(nxt, now + left[id(j)] / r)
        dt = nxt - now
        for j in list(active):
            left[id(j)] -= rates[id(j)] * dt
            if left[id(j)] <= 1e-9 * max(1.0, j.work):
                active.remove(j)
        now = nxt
    return now


def pooled_bound(jobs: list[_Job], pool: float) -> dict[str, float]:
    """A looser bound in O(n log n), for workloads too large for the programme: the larger of
    (a) shortest remaining first on one machine of the pool's capacity, each job needing at
    least ``work * cost / slope`` speed-weighted core-seconds (no schedule uses fewer: the
    hull lies under its first slope), optimal for one preemptive machine; (b) every job alone
    at its top speed. Both bound the sum of completion times; the larger is returned."""
    need = {j.spec.name: j.work * j.cost / j.slope for j in jobs}
    pending = sorted(jobs, key=lambda j: (j.release, j.spec.name))
    heap: list[tuple[float, str]] = []
    left: dict[str, float] = {}
    finish: dict[str, float] = {}
    now, i = 0.0, 0
    while i < len(pending) or heap:
        if not heap:
            now = max(now, pending[i].release)
        while i < len(pending) and pending[i].release <= now + 1e-12:
            name = pending[i].spec.name
            left[name] = need[name]
            heapq.heappush(heap, (left[name], name))
            i += 1
        rem, name = heapq.heappop(heap)
        nxt = pending[i].release if i < len(pending) else math.inf
        done_at = now + rem / pool
        if done_at <= nxt:
            finish[name] = done_at
            now = done_at
        else:
            left[name] = rem - (nxt - now) * pool
            heapq.heappush(heap, (left[name], name))
            now = nxt
    solo = {j.spec.name: j.release + j.work / j.top for j in jobs}
    return finish if sum(finish.values()) >= sum(solo.values()) else solo


def _pieces(segments: tuple[tuple[float, float], ...], dt: float, run: float, s_max: float,
            cost: float) -> list[tuple[float, float]]:
    """The work a job can do in one slot, ``x <= min over segments (a dt y + b s_max run) /
    cost`` for ``y`` speed-weighted cores, as consecutive pieces (iterations, iterations per
    core): the least cores for ``x`` iterations fill them in order (the function is concave)."""
    lines = [(a * dt / cost, b * s_max * run / cost) for a, b in segments]
    i = min(range(len(lines)), key=lambda k: (lines[k][1], -lines[k][0]))
    y = 0.0
    out: list[tuple[float, float]] = []
    while lines[i][0] > 0:
        slope, icpt = lines[i]
        nxt, at = None, math.inf
        for k, (sk, bk) in enumerate(lines):
            if sk < slope:
                cross = (bk - icpt) / (slope - sk)
                if y < cross < at or (cross == at and nxt is not None and sk < lines[nxt][0]):
                    nxt, at = k, cross
        if nxt is None:  # pragma: no cover - the last segment is flat
            break
        out.append((slope * (at - y), slope))
        y, i = at, nxt
    return out


def lower_bound(workload: Workload, slots: int = SLOTS) -> tuple[float, dict[str, float]]:
    """(sum of completion times bound, each job's share as an absolute finish time)."""
    jobs, s_max, pool = _jobs(workload)
    if len(jobs) > LP_MAX_JOBS:
        finish = pooled_bound(jobs, pool)
        return sum(finish.values()), finish
    horizon = max(_horizon(jobs, pool, s_max), max(j.release for j in jobs) + 1e-6)
    dt = horizon / slots
    starts = np.arange(slots) * dt
    # One column per piece of a job's work in a slot (_pieces), its cores implied, then per job
    # the work after the horizon and z_j; one row per job (all its work done), one per job (its
    # z_j) and one per slot (the pool). Rows per piece of (x, y) columns made the programme
    # take minutes on 400 jobs (issue 28); this one is the same programme, with the cores of a
    # slot's work substituted. Scaled for conditioning: work in shares of the job's, cores in
    # shares of the pool, z_j in horizons.
    cols: list[float] = []  # per piece column, its upper bound
    eq: tuple[list[int], list[int], list[float]] = ([], [], [])  # rows, cols, values
    ub: tuple[list[int], list[int], list[float]] = ([], [], [])
    ub_rhs: list[float] = []
    n_jobs = len(jobs)
    for ji, j in enumerate(jobs):
        first = min(slots - 1, int(j.release // dt))
        row_z = ji
        whole = _pieces(j.segments, dt, dt, s_max, j.cost)  # a slot after its release
        for t in range(first, slots):
            run = dt - max(0.0, j.release - starts[t])  # time it may run in this slot
            tau = max(starts[t], j.release)
            for length, slope in whole if run >= dt else _pieces(j.segments, dt, run, s_max,
                                                                  j.cost):
                col = len(cols)
                cols.append(length / j.work)
                eq[0].append(ji)
                eq[1].append(col)
                eq[2].append(1.0)
                # H z_j >= sum tau x + H x_after + W / (2 m)
                ub[0].append(row_z)
                ub[1].append(col)
                ub[2].append(tau / horizon)
                # the pool: sum of cores (x / slope) in the slot
                ub[0].append(n_jobs + t)
                ub[1].append(col)
                ub[2].append(j.work / (slope * pool))
        ub_rhs.append(-j.work / (2.0 * j.top) / horizon)
    ub_rhs.extend([1.0] * slots)
    n_piece = len(cols)
    after0 = n_piece
    z0 = n_piece + n_jobs
    n = z0 + n_jobs
    bounds: list[tuple[float, float | None]] = [(0.0, u) for u in cols]
    bounds += [(0.0, None)] * n_jobs
    bounds += [((j.release + j.work / j.top) / horizon, None) for j in jobs]
    for ji in range(n_jobs):
        eq[0].append(ji)
        eq[1].append(after0 + ji)
        eq[2].append(1.0)
        ub[0].extend((ji, ji))
        ub[1].extend((after0 + ji, z0 + ji))
        ub[2].extend((1.0, -1.0))
    c = np.zeros(n)
    c[z0:] = 1.0
    a_ub = coo_matrix((ub[2], (ub[0], ub[1])), shape=(n_jobs + slots, n)).tocsr()
    a_eq = coo_matrix((eq[2], (eq[0], eq[1])), shape=(n_jobs, n)).tocsr()
    res = linprog(c, A_ub=a_ub, b_ub=np.array(ub_rhs), A_eq=a_eq, b_eq=np.ones(n_jobs),
                  bounds=bounds, method="highs")
    if res.status != 0:  # pragma: no cover - the programme is always feasible and bounded
        raise RuntimeError(f"oracle: the linear programme failed: {res.message}")
    # The solver's tolerance may put the optimum a hair above the true one: shave it off so
    # that the bound stays a bound.
    finish = {j.spec.name: j.release + (float(res.x[z0 + i]) * horizon - j.release)
              * (1.0 - 1e-6) for i, j in enumerate(jobs)}
    return sum(finish.values()), finish


def ninety_bound(workload: Workload) -> dict[str, float | None]:
    """Per job, the earliest moment it can reach 90% of its loss reduction (None: it stops
    before, at its target): its submission plus that iteration at its top speed."""
    jobs, _, _ = _jobs(workload)
    out: dict[str, float | None] = {}
    for j in jobs:
        it = ninety_iteration(workload.profiles[j.spec.profile])
        out[j.spec.name] = j.release + it / j.top if it <= j.work + 1e-9 else None
    return out


def simulate_oracle(workload: Workload, seed: int | None = 0) -> RunResult:
    """The bound as a run: per job its share of the bound as a finish time (their average is
    the bound on average completion) and the earliest it can reach 90% (their average bounds
    the average time to 90%); the other metrics are left blank."""
    _, finish = lower_bound(workload)
    ninety = ninety_bound(workload)
    jobs = [JobResult(name=spec.name, profile=spec.profile, submit_s=spec.submit_s,
                      start_s=spec.submit_s, finish_s=finish[spec.name],
                      target_loss=spec.target_loss, deadline_s=spec.deadline_s,
                      first_worker="pool", reached_90_s=ninety[spec.name])
            for spec in workload.jobs]
    return RunResult(policy="oracle", seed=seed, jobs=jobs, bound=True)
