"""Discrete-event simulator of a cluster running training jobs under one scheduling policy.

It runs the core algorithms unchanged (growth, FlowCon, Algorithms 3-5): the simulator is just
another adapter that turns simulated progress into their inputs and applies their decisions.
Each worker has the node controller the agent runs on a real node (specon.core.node).
Between two events every job's rate is constant, so progress is advanced analytically and only
on the workers an event touches.

Model (workload-format.md): a job on a worker runs at
``speedup(cores) * worker.speed / (cpu_seconds_per_iteration * work_scale)`` iterations per
second; a worker's CPUs are shared work-conservingly (equal CFS shares by default), capped by
each container's limit and by the cores the job can use; a migration stops the job for
checkpoint + restore + pod restart; the loss at a given progress comes from the profile.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specon.core.categorize import JobState
from specon.core.flowcon import FlowConParams
from specon.core.node import NODE_SHARES, JobView, NodeController
from specon.core.policy import Policy
from specon.core.predict import fit_curve
from specon.core.progress import (
    JobLoad,
    NodeLoad,
    behind_equal_share,
    choose_node,
    plan_moves,
)
from specon.core.rebalance import PlacedJob, plan_rebalance
from specon.core.scoring import WorkerView, choose_host, decide_reallocation, worker_view
from specon.core.speedup import Curve, interference, thread_speed
from specon.core.threads import threads_for_limit
from specon.core.urgency import (
    GIVEN_UP,
    ON_TRACK,
    Assessment,
    assess,
    urgency,
)
from specon.sim.alloc import by_priority, greedy_marginal, waterfill
from specon.sim.milestones import milestone_iteration, ninety_iteration
from specon.sim.model import JobResult, RunResult, SimConfig
from specon.sim.noise import noisy_log
from specon.workload.models import JobSpec, Profile, Workload

ARRIVE, FINISH, FLOW_TICK, TICK, MIGRATED = range(5)
#: Where a job that stops at its target is expected to stop before its curve can be fitted
#: (as a share of its declared steps: most of a loss's fall comes early, docs/mission).
TARGET_PRIOR = 0.3


class _Job:
    __slots__ = (
        "attained",
        "cores",
        "cost_seen",
        "curve",
        "done",
        "end_iter",
        "fair",
        "iter_cost",
        "max_cores",
        "milestones",
        "observed",
        "profile",
        "rate",
        "rebalanced",
        "result",
        "seen",
        "spec",
        "state",
        "target_fit",
        "threads",
        "total_known",
        "version",
        "view",
        "worker",
    )

    def __init__(self, spec: JobSpec, profile: Profile, milestones: list[tuple[float, str]]):
        self.spec = spec
        self.profile = profile
        self.iter_cost = profile.cpu_seconds_per_iteration * spec.work_scale
        self.curve = Curve.of([(float(k), v) for k, v in profile.speedup.items()])
        #: The most cores the job can use (its thread count when it was told one).
        self.max_cores = min(spec.cores, profile.max_cores) if spec.cores is not None else \
            profile.max_cores
        #: Threads it runs now: set when it starts on a worker (docs/node-model.md).
        self.threads = self.max_cores
        #: What a policy can know of it: its step cost as measured (with an error), and
        #: whether it declares its total steps.
        self.cost_seen = self.iter_cost
        self.total_known = True
        #: The loss as its log shows it (noisier than the profile's in robustness runs).
        self.observed: Sequence[float] = profile.loss
        #: (log lines seen, predicted step of its target) for a job that stops at its target
        self.target_fit: tuple[int, float | None] = (-1, None)
        self.done = 0.0
        self.rate = 0.0
        self.cores = 0.0
        self.attained = 0.0
        #: Iterations equal shares of its workers would have given it so far (issue 28's bound)
        self.fair = 0.0
        self.version = 0
        self.worker: str | None = None
        self.state = "pending"
        #: What the node controller knows of it (it moves with the job).
        self.view = JobView.new(spec.submit_s, 0.0)
        self.seen = 0  # log lines handed to the node controller
        self.rebalanced = False
        self.milestones = milestones  # (iteration, kind) ascending
        #: Where the job ends: its last iteration, or its target when it stops there.
        self.end_iter = float(profile.iterations)
        if spec.stop_at_target:
            for it, kind in milestones:
                if kind == "target":
                    self.end_iter = min(self.end_iter, it)
        self.result = JobResult(
            name=spec.name, profile=spec.profile, submit_s=spec.submit_s,
            target_loss=spec.target_loss, deadline_s=spec.deadline_s,
        )

    def logged(self) -> int:
        n = len(self.profile.loss)
        return min(n, int(self.done * n / self.profile.iterations + 1e-9))

    @property
    def cat(self) -> JobState:
        return self.view.cat

    @property
    def last_eff(self) -> float | None:
        return self.view.efficiency

    def new_losses(self) -> list[float]:
        """The log lines written since the last call."""
        k = self.logged()
        out = list(self.observed[self.seen : k])
        self.seen = k
        return out


class _Worker:
    __slots__ = ("cpus", "ctl", "inflight", "jobs", "last_t", "name", "reserved", "speed")

    def __init__(self, name: str, cpus: float, speed: float, params: FlowConParams,
                 alpha: float) -> None:
        self.name = name
        self.cpus = cpus
        self.speed = speed
        self.jobs: dict[str, _Job] = {}
        #: The node controller the agent runs (FlowCon, categories, QoS limits); its CPU
        #: counters are each job's attained core-seconds.
        self.ctl = NodeController(params, alpha)
        self.last_t = 0.0
        self.inflight = 0
        self.reserved: set[str] = set()

    def feed(self) -> dict[str, float]:
        """Hand the controller the losses logged since the last call; each job's CPU counter."""
        for name, job in self.jobs.items():
            self.ctl.add_losses(name, job.new_losses())
        return {name: job.attained for name, job in self.jobs.items()}


class Simulator:
    """One run of one policy over one workload."""

    def __init__(
        self,
        workload: Workload,
        policy: Policy,
        config: SimConfig | None = None,
        seed: int | None = 0,
    ) -> None:
        if policy.name == "oracle":
            raise ValueError("the oracle is simulated by specon.sim.oracle, not Simulator")
        for kind, name, known in (("share", policy.share, {**NODE_SHARES, **SHARE_RULES}),
                                  ("placement", policy.placement, PLACEMENTS),
                                  ("moves", policy.moves, MOVES)):
            if name not in known:
                raise ValueError(f"policy {policy.name!r}: unknown {kind} rule {name!r} "
                                 f"(known: {', '.join(sorted(known))})")
        self.w = workload
        self.policy = policy
        #: A share rule of the simulator's own, or a node share rule of the core (which the
        #: agent runs too), applied as the progress-aware policy's are.
        self.share = SHARE_RULES.get(policy.share) or ShareRule(_node_rule, ticked=True)
        self.cfg = config or SimConfig()
        self.seed = seed
        self.rng = random.Random(seed)
        self.fparams = FlowConParams(
            alpha=self.cfg.flow_alpha, itval_s=self.cfg.interval_s, beta=self.cfg.flowcon_beta,
            max_itval_s=max(self.cfg.flowcon_max_itval_s, self.cfg.interval_s),
        )
        self.workers = {
            ws.name: _Worker(ws.name, ws.cpus, ws.speed, self.fparams, self.cfg.alpha)
            for ws in workload.cluster.workers
        }
        ninety = {name: ninety_iteration(p) for name, p in workload.profiles.items()}
        self.jobs: dict[str, _Job] = {}
        for spec in workload.jobs:
            prof = workload.profiles[spec.profile]
            ms = [(ninety[spec.profile], "90")]
            if spec.target_loss is not None:
                it = milestone_iteration(prof, spec.target_loss)
                if it is not None:
                    ms.append((it, "target"))
            ms.sort()
            job = _Job(spec, prof, ms)
            know = random.Random(f"{seed}:{spec.name}")
            job.cost_seen = job.iter_cost * (1.0 + self.cfg.cost_error * know.uniform(-1, 1))
            job.total_known = know.random() >= self.cfg.unknown_total_share
            cfg = self.cfg
            job.observed = noisy_log(prof.loss, random.Random(f"{seed}:{spec.name}:log"),
                                     cfg.loss_noise, cfg.loss_spikes, cfg.loss_bump)
            self.jobs[spec.name] = job
        self.heap: list[tuple[float, int, int, str, int]] = []
        self.seq = 0
        self.now = 0.0
        self.events = 0
        self.remaining = len(self.jobs)
        self.migrating = 0
        self.flow_versions: dict[str, int] = dict.fromkeys(self.workers, 0)
        self.flow_next: dict[str, float] = dict.fromkeys(self.workers, math.inf)
        self.marked_at: dict[str, float] = {}
        #: WorkerView per worker, dropped whenever the worker's jobs, categories or load change.
        self._view_cache: dict[str, WorkerView] = {}
        self.pending_moves: dict[str, tuple[str, str]] = {}
        self.result = RunResult(policy=policy.name, seed=seed, jobs=[])
        self.cpu = self.result.cpu
        self.shares = self.result.shares
        self.counts = self.result.counts
        for name in self.workers:
            self.cpu[name] = [(0.0, 0.0)]
            self.counts[name] = [(0.0, 0)]

    # -- event plumbing ------------------------------------------------------------------------
    def push(self, t: float, kind: int, key: str = "", version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, key, version))

    def run(self, progress: Callable[[float], None] | None = None) -> RunResult:
        for job in self.jobs.values():
            self.push(job.spec.submit_s, ARRIVE, job.spec.name)
        if self.policy.specon or self.share.ticked:
            self.push(self.cfg.interval_s, TICK)
        while self.heap and self.remaining > 0:
            t, _, kind, key, version = heapq.heappop(self.heap)
            self.now = t
            self.events += 1
            if kind == ARRIVE:
                self._arrive(self.jobs[key])
            elif kind == FINISH:
                job = self.jobs[key]
                if job.version == version and job.state == "running":
                    self._finish(job)
            elif kind == FLOW_TICK:
                if self.flow_versions[key] == version:
                    self._flow_tick(self.workers[key])
            elif kind == TICK:
                self._tick()
                if self.remaining > 0:
                    self.push(t + self.cfg.interval_s, TICK)
            elif kind == MIGRATED:
                self._land(self.jobs[key], version)
            if progress is not None and kind == FINISH:
                progress(1.0)
        if self.remaining > 0:
            stuck = sorted(j.spec.name for j in self.jobs.values() if j.state != "done")
            raise RuntimeError(f"simulation stalled with jobs unfinished: {stuck[:5]}")
        self.result.jobs = [j.result for j in self.jobs.values()]
        self.result.events = self.events
        return self.result

    # -- progress --------------------------------------------------------------------------
    def _advance(self, w: _Worker) -> None:
        t = self.now
        dt = t - w.last_t
        if dt > 0:
            equal = w.cpus / max(len(w.jobs), 1)
            for job in w.jobs.values():
                job.fair += (dt * job.curve.at(min(self._demand(job), equal)) * w.speed
                             / job.iter_cost)
                if job.rate > 0:
                    before = job.done
                    job.done = min(job.done + job.rate * dt, job.end_iter)
                    while job.milestones and job.milestones[0][0] <= job.done + 1e-9:
                        it, kind = job.milestones.pop(0)
                        at = w.last_t + max(0.0, it - before) / job.rate
                        if kind == "90":
                            job.result.reached_90_s = at
                        else:
                            job.result.target_reached_s = at
                job.attained += job.cores * dt
        w.last_t = t

    def _allocate(self, w: _Worker) -> None:
        """Divide the worker's CPU among its jobs and reschedule their completions."""
        self._view_cache.pop(w.name, None)
        jobs = list(w.jobs.values())
        flow = w.ctl.flow.limits
        caps = [min(self._demand(j), flow.get(j.spec.name, 1.0) * w.cpus)
                for j in jobs]
        cores = self.share.divide(self, w, jobs, caps)
        total = sum(cores)
        for job, c in zip(jobs, cores, strict=True):
            job.cores = c
            job.rate = self._speed(job, w, c, total - c) / job.iter_cost
            job.version += 1
            if job.rate > 0:
                left = max(0.0, job.end_iter - job.done)
                self.push(self.now + left / job.rate, FINISH, job.spec.name, job.version)
            if self.cfg.record_timeline:
                self.shares.setdefault(job.spec.name, []).append((self.now, w.name, c))
        self._record(self.cpu[w.name], total)

    def _hints(self, job: _Job) -> bool:
        """Jobs that use the SDK (the checkpointable ones) follow the thread hint."""
        return self.policy.thread_hint and job.spec.migratable

    def _hinted_caps(self, w: _Worker, jobs: list[_Job]) -> list[float]:
        """What each job could use: with the hint, as many threads as the worker has."""
        return [min(w.cpus, j.curve.max_cores) if self._hints(j) else self._demand(j)
                for j in jobs]

    def _work_left(self, job: _Job) -> float:
        """Seconds of work left on one speed-1 core, as the policy can know it: from the
        declared total steps, or, without one, as much again as done so far."""
        if job.total_known:
            steps = max(0.0, job.profile.iterations - job.done)
        else:
            steps = max(job.done, 0.1 * job.profile.iterations)
        if job.spec.stop_at_target and job.spec.target_loss is not None:
            k = job.logged()
            if job.target_fit[0] != k:  # refit only when the log has grown
                left = self._steps_to_target(job)
                job.target_fit = (k, None if left is None else job.done + left)
            at = job.target_fit[1]
            if at is None:  # no fit yet: most of a loss's fall comes in its first 30%
                at = TARGET_PRIOR * job.profile.iterations
            steps = min(steps, max(0.0, at - job.done))
        return steps * job.cost_seen

    def _load(self, job: _Job, w: _Worker) -> JobLoad:
        if self._hints(job):
            cap, threads = min(w.cpus, job.curve.max_cores), None
        else:
            cap = threads = min(self._demand_on(job, w), w.cpus)
        return JobLoad(job.spec.name, self._work_left(job), job.curve, cap, job.cat.category,
                       threads, self._starved(job), job.done * job.cost_seen)

    def _starved(self, job: _Job) -> bool:
        """Behind what equal shares would have given it (specon.core.progress.behind_equal_share),
        its total steps as the policy knows them."""
        total = job.done + self._work_left(job) / max(job.cost_seen, 1e-12)
        return behind_equal_share(job.done, job.fair, total)

    def _demand_on(self, job: _Job, w: _Worker) -> float:
        told = job.spec.cores
        return min(told if told is not None else w.cpus, job.curve.max_cores)

    def _node(self, w: _Worker, extra: Sequence[_Job] = ()) -> NodeLoad:
        jobs = [self._load(j, w) for j in (*w.jobs.values(), *extra)]
        return NodeLoad(w.name, w.cpus, w.speed, tuple(jobs))

    def _demand(self, job: _Job) -> float:
        """Cores the job's threads can keep busy (it cannot use more than its table's keys)."""
        return min(job.threads, job.curve.max_cores)

    def _speed(self, job: _Job, w: _Worker, cores: float, others: float) -> float:
        """Iterations' speed factor on ``w`` (docs/node-model.md): the job's threads on the
        cores it gets, the worker's per-core speed, and interference from the other jobs."""
        cfg = self.cfg
        return (thread_speed(job.curve, job.threads, cores, cfg.oversubscription_penalty)
                * w.speed * interference(w.cpus, cores, others, cfg.interference))

    def _qos_level(self, job: _Job, w: _Worker, to_target: bool) -> int:
        """The job's urgency (specon.core.urgency): to its target loss, predicted from its
        loss curve so far (``to_target``: ``dqoes``), or to its declared end (``deadline``)."""
        spec = job.spec
        if to_target:
            if spec.target_loss is None:
                return ON_TRACK
            if job.result.target_reached_s is not None:
                return GIVEN_UP
            steps = self._steps_to_target(job)
        else:
            if spec.deadline_s is None:
                return ON_TRACK
            # The job's declared length (it reports its total steps), not where it will stop.
            steps = max(0.0, job.profile.iterations - job.done)
        left = (spec.submit_s + spec.deadline_s - self.now) if spec.deadline_s else math.inf
        best = job.profile.speed(job.max_cores) * w.speed / job.iter_cost
        return urgency(steps, job.rate, best, left)

    def _agent_qos_caps(self, w: _Worker, jobs: list[_Job], caps: list[float]) -> list[float]:
        """The node agent's rule (specon_agent/qos_tracker.py, docs/qos.md): each job with a
        target or deadline assessed from its rate and cores so far, the worker divided by strict
        priority into limits; jobs without either keep FlowCon's caps."""
        judged: dict[str, Assessment | None] = {}
        for j in jobs:
            spec = j.spec
            if spec.target_loss is None and spec.deadline_s is None:
                judged[spec.name] = None
                continue
            reached = j.result.target_reached_s is not None
            if spec.target_loss is not None:
                steps = None if reached else self._steps_to_target(j)
            else:
                steps = max(0.0, j.profile.iterations - j.done)
            left = (spec.submit_s + spec.deadline_s - self.now) if spec.deadline_s else math.inf
            judged[spec.name] = assess(steps, j.rate, j.cores, j.max_cores, left, reached)
        limits, _ = w.ctl.judge_qos(judged, w.cpus, self.cfg.qos_floor_cores)
        out = []
        for j, c in zip(jobs, caps, strict=True):
            lim = limits[j.spec.name]
            out.append(c if lim is None else min(j.max_cores, lim * w.cpus))
        return out

    def _steps_to_target(self, job: _Job) -> float | None:
        """Steps still needed to reach the target, from a learning curve fitted so far."""
        k = job.logged()
        if k < 5 or job.spec.target_loss is None:
            return None
        n = len(job.profile.loss)
        steps = [(i + 1) * job.profile.iterations / n for i in range(k)]
        fit = fit_curve(steps, job.observed[:k])
        if fit is None:
            return None
        return max(0.0, fit.step_for(job.spec.target_loss) - job.done)

    def _slaq_value(self, job: _Job) -> float:
        """Predicted normalised loss reduction per unit of relative speed (optimistic if new)."""
        if job.last_eff is None:
            return 1e6
        cores = max(job.cores, 1e-3)
        return job.last_eff * cores / max(job.profile.speed(cores), 1e-9)

    def _record(self, series: list[tuple[float, float]], value: float) -> None:
        if series and series[-1][0] == self.now:
            series[-1] = (self.now, value)
        elif not series or series[-1][1] != value:
            series.append((self.now, value))

    def _count(self, w: _Worker) -> None:
        series = self.counts[w.name]
        n = len(w.jobs)
        if series and series[-1][0] == self.now:
            series[-1] = (self.now, n)
        elif series[-1][1] != n:
            series.append((self.now, n))

    # -- listener: arrivals and departures ------------------------------------------------------
    def _fits(self, job: _Job) -> list[_Worker]:
        """Workers that can hold the job: a job told its thread count needs that many CPUs; one
        that takes the cores it sees (as PyTorch does) runs anywhere."""
        if job.spec.cores is None:
            return list(self.workers.values())
        return [w for w in self.workers.values() if w.cpus >= job.max_cores]

    def _place(self, job: _Job) -> str:
        return PLACEMENTS[self.policy.placement](self, job, self._fits(job))

    def _placement_load(self, job: _Job) -> JobLoad:
        """A new job as placement sees it (its cap depends on the worker: the largest)."""
        biggest = max(w.cpus for w in self._fits(job))
        cap = min(biggest, job.curve.max_cores) if self._hints(job) else min(
            self._demand_on(job, max(self._fits(job), key=lambda w: w.cpus)), biggest)
        return JobLoad(job.spec.name, self._work_left(job), job.curve, cap, job.cat.category)

    def _views(self, workers: Sequence[_Worker]) -> list[WorkerView]:
        views = []
        for w in workers:
            cached = self._view_cache.get(w.name)
            if cached is not None:
                views.append(cached)
                continue
            used = self.cpu[w.name][-1][1] / w.cpus
            view = worker_view(w.name, w.ctl.counts(), len(w.reserved), used,
                               capacity=w.cpus * w.speed)
            self._view_cache[w.name] = view
            views.append(view)
        return views

    def _arrive(self, job: _Job) -> None:
        name = self._place(job)
        job.result.start_s = self.now
        job.result.first_worker = name
        self._join(job, self.workers[name])

    def _join(self, job: _Job, w: _Worker) -> None:
        self._advance(w)
        job.state = "running"
        job.worker = w.name
        # Threads are fixed when the process starts: the count it was told, or the cores it
        # sees on this worker (PyTorch's default), at most what its table says it can use.
        told = job.spec.cores
        job.threads = min(told if told is not None else w.cpus, job.curve.max_cores)
        w.jobs[job.spec.name] = job
        w.ctl.arrive(job.spec.name, self.now, job.attained, job.view)
        self._flow_schedule(w)
        self._allocate(w)
        self._count(w)

    def _leave(self, job: _Job, w: _Worker) -> None:
        self._advance(w)
        del w.jobs[job.spec.name]
        job.worker = None
        job.rate = 0.0
        job.cores = 0.0
        job.version += 1
        if self.cfg.record_timeline:
            self.shares.setdefault(job.spec.name, []).append((self.now, "", 0.0))
        w.ctl.depart(job.spec.name, self.now)
        self._flow_schedule(w)
        self._allocate(w)
        self._count(w)

    def _finish(self, job: _Job) -> None:
        w = self.workers[job.worker or ""]
        self._advance(w)
        job.done = job.end_iter
        job.state = "done"
        job.result.finish_s = self.now
        job.result.cpu_s = job.attained
        self._leave(job, w)
        self.remaining -= 1

    # -- FlowCon --------------------------------------------------------------------------
    def _flow_schedule(self, w: _Worker) -> None:
        """Follow the controller's next FlowCon interval (its listener may have moved it)."""
        if not self.policy.flowcon:
            return
        due = w.ctl.flow_due
        if due != self.flow_next[w.name]:
            self.flow_versions[w.name] += 1
            self.flow_next[w.name] = due
            if due < math.inf:
                self.push(due, FLOW_TICK, w.name, self.flow_versions[w.name])

    def _flow_tick(self, w: _Worker) -> None:
        self._advance(w)
        w.ctl.flow_tick(self.now, w.feed())
        self._allocate(w)
        self._flow_schedule(w)

    # -- SpeCon: categories, migration, rebalancing ------------------------------------------
    def _tick(self) -> None:
        requests: list[_Job] = []
        for w in self.workers.values():
            if not w.jobs:
                continue
            self._advance(w)
            if self.policy.specon:
                requests.extend(self._categorize(w))
            if self.share.ticked:
                if self.share.measures and not self.policy.flowcon:
                    self._measure(w)
                self._allocate(w)
        MOVES[self.policy.moves](self, requests)

    def _progress_moves(self) -> None:
        """Moves whose predicted gain beats their cost (specon.core.progress.plan_moves)."""
        room = self.cfg.max_inflight_total - self.migrating
        if room <= 0:
            return
        busy = frozenset(w.name for w in self.workers.values()
                         if w.inflight >= self.cfg.max_inflight_per_node)
        nodes = [self._node(w, [self.jobs[n] for n in w.reserved])
                 for w in self.workers.values()]
        movable = frozenset(j.spec.name for j in self.jobs.values()
                            if j.state == "running" and j.spec.migratable)
        cost = {j.spec.name: j.profile.checkpoint_seconds + j.profile.restore_seconds
                + self.cfg.restart_s for j in self.jobs.values() if j.state == "running"}
        for mv in plan_moves(nodes, cost, movable, busy, self.cfg.weights, limit=room,
                             margin=self.cfg.move_margin):
            job = self.jobs[mv.job]
            src, dst = self.workers[mv.source], self.workers[mv.target]
            if job.state == "running" and self._can_move(src, dst):
                self._move(job, src, dst, "migrate")

    def _measure(self, w: _Worker) -> None:
        """Efficiency per job for SLAQ's predictions (FlowCon's measurement, no limits)."""
        w.ctl.measure(self.now, w.feed())

    def _categorize(self, w: _Worker) -> list[_Job]:
        requests = w.ctl.categorize_tick(self.now, w.feed())
        self._view_cache.pop(w.name, None)
        return [w.jobs[n] for n in requests]

    def _reallocate(self, job: _Job) -> None:
        """Algorithm 4 for one reallocation request (specon.core.scoring.decide_reallocation,
        the manager's rule)."""
        src = self.workers[job.worker or ""]
        if job.cat.migrated or job.state != "running":
            return
        d = decide_reallocation(self._views(self._fits(job)), self.cfg.weights, src.name,
                                job.cat.category, movable=job.spec.migratable)
        if d.decision == "wait":
            return
        dst = self.workers[d.target] if d.decision == "migrate" and d.target else None
        if dst is not None and not self._can_move(src, dst):
            return  # caps reached: the request is raised again at the next interval
        src.ctl.mark_migrated(job.spec.name)
        self._mark(job)
        if dst is not None:
            self._move(job, src, dst, "migrate")

    def _mark(self, job: _Job) -> None:
        """Remember when the job was marked migrated (its converged duration starts here)."""
        self.marked_at[job.spec.name] = self.now
        job.result.marked_s = self.now

    def _can_move(self, src: _Worker, dst: _Worker) -> bool:
        cap = self.cfg.max_inflight_per_node
        return (
            src.inflight < cap and dst.inflight < cap
            and self.migrating < self.cfg.max_inflight_total
        )

    def _move(self, job: _Job, src: _Worker, dst: _Worker, kind: str) -> None:
        prof = job.profile
        cost = prof.checkpoint_seconds + prof.restore_seconds + self.cfg.restart_s
        self._leave(job, src)
        job.state = "migrating"
        src.inflight += 1
        dst.inflight += 1
        dst.reserved.add(job.spec.name)
        self._view_cache.pop(dst.name, None)
        self.migrating += 1
        self._count(dst)
        job.result.migrations.append(
            {"t": self.now, "kind": kind, "from": src.name, "to": dst.name, "seconds": cost}
        )
        self.pending_moves[job.spec.name] = (src.name, dst.name)
        self.push(self.now + cost, MIGRATED, job.spec.name)

    def _land(self, job: _Job, _version: int) -> None:
        src_name, dst_name = self.pending_moves.pop(job.spec.name)
        src, dst = self.workers[src_name], self.workers[dst_name]
        src.inflight -= 1
        dst.inflight -= 1
        dst.reserved.discard(job.spec.name)
        self._view_cache.pop(dst.name, None)
        self.migrating -= 1
        self._join(job, dst)

    def _rebalance(self) -> None:
        running = [j for j in self.jobs.values() if j.state in ("running", "migrating")]
        if not running or self.migrating:
            return
        placed = [
            PlacedJob(
                name=j.spec.name, worker=j.worker or "",
                migrated_at=self.marked_at.get(j.spec.name) if j.cat.migrated else None,
                rebalanced=j.rebalanced, movable=j.spec.migratable,
            )
            for j in running
        ]
        moves = plan_rebalance(placed, list(self.workers), self.now, self.cfg.min_balance)
        for mv in moves:
            job = self.jobs[mv.job]
            src, dst = self.workers[mv.source], self.workers[mv.target]
            if job.state != "running" or not self._can_move(src, dst):
                continue
            job.rebalanced = True
            self._move(job, src, dst, "rebalance")


# -- the rules a policy is made of, by name ---------------------------------------------------
#: A share rule divides one worker: (simulator, worker, its jobs, each job's cap) -> cores.
ShareFn = Callable[[Simulator, _Worker, list[_Job], list[float]], list[float]]
#: A placement rule picks a worker for a new job among those that fit it.
PlaceFn = Callable[[Simulator, _Job, list[_Worker]], str]
#: A move rule runs at each interval after the categories (may start migrations).
MoveFn = Callable[[Simulator, list[_Job]], None]


@dataclass(frozen=True)
class ShareRule:
    divide: ShareFn
    ticked: bool = False  # re-divide the CPU at every interval, not only on arrivals/exits
    #: needs each job's growth efficiency at every interval (measured as FlowCon does, also
    #: when the policy runs no FlowCon)
    measures: bool = False


SHARE_RULES: dict[str, ShareRule] = {}
PLACEMENTS: dict[str, PlaceFn] = {}
MOVES: dict[str, MoveFn] = {}


def register_share(name: str, ticked: bool = False,
                   measures: bool = False) -> Callable[[ShareFn], ShareFn]:
    def deco(fn: ShareFn) -> ShareFn:
        SHARE_RULES[name] = ShareRule(fn, ticked, measures)
        return fn
    return deco


@register_share("equal")
def _equal(sim: Simulator, w: _Worker, jobs: list[_Job], caps: list[float]) -> list[float]:
    return waterfill(w.cpus, caps, [1.0] * len(jobs))


@register_share("las", ticked=True)
def _las(sim: Simulator, w: _Worker, jobs: list[_Job], caps: list[float]) -> list[float]:
    th = sim.cfg.las_thresholds
    return by_priority(w.cpus, caps, [sum(1 for x in th if j.attained >= x) for j in jobs])


@register_share("dqoes", ticked=True)
def _dqoes(sim: Simulator, w: _Worker, jobs: list[_Job], caps: list[float]) -> list[float]:
    return by_priority(w.cpus, caps, [sim._qos_level(j, w, to_target=True) for j in jobs])


@register_share("deadline", ticked=True)
def _deadline(sim: Simulator, w: _Worker, jobs: list[_Job], caps: list[float]) -> list[float]:
    return by_priority(w.cpus, caps, [sim._qos_level(j, w, to_target=False) for j in jobs])


@register_share("agent-qos", ticked=True)
def _agent_qos(sim: Simulator, w: _Worker, jobs: list[_Job], caps: list[float]) -> list[float]:
    return waterfill(w.cpus, sim._agent_qos_caps(w, jobs, caps), [1.0] * len(jobs))


@register_share("slaq", ticked=True, measures=True)
def _slaq(sim: Simulator, w: _Worker, jobs: list[_Job], caps: list[float]) -> list[float]:
    return greedy_marginal(w.cpus, caps, [sim._slaq_value(j) for j in jobs],
                           [j.profile.speed for j in jobs], sim.cfg.slaq_quantum)


def _node_rule(sim: Simulator, w: _Worker, jobs: list[_Job], caps: list[float]) -> list[float]:
    """A node share rule of the core (specon.core.node.NODE_SHARES: the progress-aware
    policy's, a test's), run by the worker's node controller as the agent runs it; the shares
    are limits, and jobs that take the hint run as many threads as their limit allows."""
    del caps
    shares = w.ctl.divide(sim.policy.share, w.cpus, [sim._load(j, w) for j in jobs],
                          sim.cfg.weights, sim.cfg.fair_share)
    cores = waterfill(w.cpus, [min(c, shares[j.spec.name]) for j, c in
                               zip(jobs, sim._hinted_caps(w, jobs), strict=True)],
                      [1.0] * len(jobs))
    for j in jobs:
        if sim._hints(j):  # the agent's rule for the hint (specon.core.threads)
            j.threads = min(threads_for_limit(shares[j.spec.name], w.cpus), j.curve.max_cores)
    return cores


def _spread(sim: Simulator, job: _Job, fits: list[_Worker]) -> str:
    """Kubernetes' default: least requested (a pod without requests counts 100m), random
    among ties."""
    def requested(w: _Worker) -> float:
        return (len(w.jobs) + len(w.reserved)) * sim.cfg.request_cpu / w.cpus

    best = min(requested(w) for w in fits)
    ties = [w.name for w in fits if requested(w) <= best + 1e-12]
    return ties[0] if len(ties) == 1 else sim.rng.choice(sorted(ties))


def _specon_place(sim: Simulator, job: _Job, fits: list[_Worker]) -> str:
    """Algorithm 4 for a new job (specon.core.scoring.choose_host)."""
    return choose_host(sim._views(fits), sim.cfg.weights).target or fits[0].name


def _progress_place(sim: Simulator, job: _Job, fits: list[_Worker]) -> str:
    """Where the job adds the least predicted completion (specon.core.progress.choose_node)."""
    nodes = [sim._node(w, [sim.jobs[n] for n in w.reserved]) for w in fits]
    load = sim._load(job, fits[0]) if len(fits) == 1 else sim._placement_load(job)
    return choose_node(nodes, load, sim.cfg.weights) or fits[0].name


def _no_moves(sim: Simulator, requests: list[_Job]) -> None:
    del sim, requests


def _specon_moves(sim: Simulator, requests: list[_Job]) -> None:
    """Algorithm 4 for each reallocation request, then Algorithm 5."""
    for job in requests:
        sim._reallocate(job)
    if sim.cfg.rebalance:
        sim._rebalance()


def _progress_moves(sim: Simulator, requests: list[_Job]) -> None:
    del requests
    sim._progress_moves()


PLACEMENTS.update(spread=_spread, specon=_specon_place, progress=_progress_place)
MOVES.update(none=_no_moves, specon=_specon_moves, progress=_progress_moves)
