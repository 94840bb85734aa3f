"""The clairvoyant reference: the whole cluster pooled, migration free, shortest remaining first.

It knows every job's remaining work. Jobs are served in order of remaining time at their best
speed (SRPT); each gets the cores it can use (its largest speed-up key) until the pool is
exhausted, so sub-linear speed-ups are respected the way heSRPT does greedily. It is reported
as the headroom line: how much a scheduler could gain at most, never as a competitor.
"""

from __future__ import annotations

import heapq

from specon.sim.engine import milestone_iteration, ninety_iteration
from specon.sim.model import JobResult, RunResult
from specon.workload.models import Workload


def simulate_oracle(workload: Workload, seed: int | None = 0) -> RunResult:
    pool = sum(w.cpus * w.speed for w in workload.cluster.workers)
    jobs = sorted(workload.jobs, key=lambda j: (j.submit_s, j.name))
    results: dict[str, JobResult] = {}
    left: dict[str, float] = {}  # remaining iterations
    total: dict[str, float] = {}  # iterations to run (fewer when it stops at its target)
    cost: dict[str, float] = {}
    cap: dict[str, float] = {}
    marks: dict[str, list[tuple[float, str]]] = {}
    arrivals = [(j.submit_s, j.name) for j in jobs]
    heapq.heapify(arrivals)
    specs = {j.name: j for j in jobs}
    active: list[str] = []
    now = 0.0
    rates: dict[str, float] = {}
    events = 0
    while arrivals or active:
        # rates for the current set
        def best_time(n: str) -> float:
            prof = workload.profiles[specs[n].profile]
            return left[n] * cost[n] / prof.speed(cap[n])

        active.sort(key=lambda n: (best_time(n), n))
        free = pool
        rates = {}
        for n in active:
            prof = workload.profiles[specs[n].profile]
            c = min(cap[n], free)
            free -= c
            rates[n] = prof.speed(c) / cost[n] if c > 0 else 0.0
        t_next = arrivals[0][0] if arrivals else float("inf")
        for n in active:
            if rates[n] > 0:
                t_next = min(t_next, now + left[n] / rates[n])
        dt = t_next - now
        for n in list(active):
            r = rates[n]
            if r <= 0:
                continue
            before = total[n] - left[n]
            left[n] -= r * dt
            done = total[n] - left[n]
            while marks[n] and marks[n][0][0] <= done + 1e-9:
                it, kind = marks[n].pop(0)
                at = now + max(0.0, it - before) / r
                if kind == "90":
                    results[n].reached_90_s = at
                else:
                    results[n].target_reached_s = at
            if left[n] <= 1e-9 * max(1.0, total[n]):
                results[n].finish_s = t_next
                active.remove(n)
        now = t_next
        events += 1
        while arrivals and arrivals[0][0] <= now + 1e-12:
            _, n = heapq.heappop(arrivals)
            spec = specs[n]
            prof = workload.profiles[spec.profile]
            ms = [(ninety_iteration(prof), "90")]
            if spec.target_loss is not None:
                reach = milestone_iteration(prof, spec.target_loss)
                if reach is not None:
                    ms.append((reach, "target"))
            end = float(prof.iterations)
            if spec.stop_at_target:
                end = min([end] + [it for it, kind in ms if kind == "target"])
            left[n] = end
            total[n] = end
            cost[n] = prof.cpu_seconds_per_iteration * spec.work_scale
            cap[n] = spec.cores if spec.cores is not None else prof.max_cores
            marks[n] = sorted(ms)
            results[n] = JobResult(
                name=n, profile=spec.profile, submit_s=spec.submit_s, start_s=now,
                target_loss=spec.target_loss, deadline_s=spec.deadline_s, first_worker="pool",
            )
            active.append(n)
    res = RunResult(policy="oracle", seed=seed, jobs=[results[j.name] for j in workload.jobs])
    res.events = events
    return res
