"""The simulator's event loop: arrivals, completions, FlowCon intervals, the policy's interval
and migrations landing, each handled on the workers it touches. Between two events every
job's rate is constant (specon.sim.engine.bookkeeping advances it analytically); after each
change the worker's CPU is divided again by the policy's share rule and completions are
rescheduled. The node model is docs/node-model.md."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable

from specon.core.flowcon import FlowConParams
from specon.core.node import NODE_SHARES
from specon.core.policy import Policy
from specon.core.scoring import WorkerView
from specon.core.speedup import interference, thread_speed
from specon.sim.engine import inputs
from specon.sim.engine.bookkeeping import Job, Worker
from specon.sim.engine.results import Recorder
from specon.sim.engine.rules import MOVES, NODE_RULE, PLACEMENTS, SHARE_RULES
from specon.sim.milestones import milestone_iteration, ninety_iteration
from specon.sim.model import RunResult, SimConfig
from specon.sim.noise import noisy_log
from specon.workload.models import Workload

ARRIVE, FINISH, FLOW_TICK, TICK, MIGRATED = range(5)


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
        self.share = SHARE_RULES.get(policy.share) or NODE_RULE
        self.cfg = config or SimConfig()
        self.seed = seed
        self.rng = random.Random(seed)
        self.fparams = FlowConParams(
            alpha=self.cfg.flow_alpha, itval_s=self.cfg.interval_s, beta=self.cfg.flowcon_beta,
            max_itval_s=max(self.cfg.flowcon_max_itval_s, self.cfg.interval_s),
        )
        self.workers = {
            ws.name: Worker(ws.name, ws.cpus, ws.speed, self.fparams, self.cfg.alpha,
                            inputs.seen_speed(self.cfg, seed, ws.name, ws.speed))
            for ws in workload.cluster.workers
        }
        ninety = {name: ninety_iteration(p) for name, p in workload.profiles.items()}
        self.jobs: dict[str, Job] = {}
        for spec in workload.jobs:
            prof = workload.profiles[spec.profile]
            ms = [(ninety[spec.profile], "90")]
            if spec.target_loss is not None:
                it = milestone_iteration(prof, spec.target_loss)
                if it is not None:
                    ms.append((it, "target"))
            ms.sort()
            job = Job(spec, prof, ms)
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
        self.view_cache: dict[str, WorkerView] = {}
        self.pending_moves: dict[str, tuple[str, str]] = {}
        self.record = Recorder(policy.name, seed, self.workers, self.cfg.record_timeline)

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
                self._land(self.jobs[key])
            if progress is not None and kind == FINISH:
                progress(1.0)
        if self.remaining > 0:
            stuck = sorted(j.spec.name for j in self.jobs.values() if j.state != "done")
            raise RuntimeError(f"simulation stalled with jobs unfinished: {stuck[:5]}")
        return self.record.close((j.result for j in self.jobs.values()), self.events)

    # -- the CPU ---------------------------------------------------------------------------------
    def _allocate(self, w: Worker) -> None:
        """Divide the worker's CPU among its jobs and reschedule their completions."""
        self.view_cache.pop(w.name, None)
        jobs = list(w.jobs.values())
        flow = w.ctl.flow.limits
        caps = [min(j.demand(), flow.get(j.spec.name, 1.0) * w.cpus)
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
            self.record.share(self.now, job.spec.name, w.name, c)
        self.record.cpu(self.now, w.name, total)

    def _speed(self, job: Job, w: Worker, cores: float, others: float) -> float:
        """Iterations' speed factor on ``w`` (docs/node-model.md): the job's threads on the
        cores it gets, the worker's per-core speed, and interference from the other jobs."""
        cfg = self.cfg
        return (thread_speed(job.curve, job.threads, cores, cfg.oversubscription_penalty)
                * w.speed * interference(w.cpus, cores, others, cfg.interference))

    def _count(self, w: Worker) -> None:
        self.record.count(self.now, w.name, len(w.jobs))

    # -- arrivals and departures ----------------------------------------------------------------
    def _arrive(self, job: Job) -> None:
        name = PLACEMENTS[self.policy.placement](self, job, inputs.fits(self, job))
        job.result.start_s = self.now
        job.result.first_worker = name
        self._join(job, self.workers[name])

    def _join(self, job: Job, w: Worker) -> None:
        w.advance(self.now)
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

    def _leave(self, job: Job, w: Worker) -> None:
        w.advance(self.now)
        del w.jobs[job.spec.name]
        job.worker = None
        job.rate = 0.0
        job.cores = 0.0
        job.version += 1
        self.record.share(self.now, job.spec.name, "", 0.0)
        w.ctl.depart(job.spec.name, self.now)
        self._flow_schedule(w)
        self._allocate(w)
        self._count(w)

    def _finish(self, job: Job) -> None:
        w = self.workers[job.worker or ""]
        w.advance(self.now)
        job.done = job.end_iter
        job.state = "done"
        job.result.finish_s = self.now
        job.result.cpu_s = job.attained
        self._leave(job, w)
        self.remaining -= 1

    # -- FlowCon ----------------------------------------------------------------------------------
    def _flow_schedule(self, w: Worker) -> None:
        """Follow the controller's next FlowCon interval (its listener may have moved it)."""
        if not self.policy.flowcon:
            return
        due = w.ctl.flow_due
        if due != self.flow_next[w.name]:
            self.flow_versions[w.name] += 1
            self.flow_next[w.name] = due
            if due < math.inf:
                self.push(due, FLOW_TICK, w.name, self.flow_versions[w.name])

    def _flow_tick(self, w: Worker) -> None:
        w.advance(self.now)
        w.ctl.flow_tick(self.now, w.feed())
        self._allocate(w)
        self._flow_schedule(w)

    # -- the policy's interval: categories, shares, moves ------------------------------------------
    def _tick(self) -> None:
        requests: list[Job] = []
        for w in self.workers.values():
            if not w.jobs:
                continue
            w.advance(self.now)
            if self.policy.specon:
                requests.extend(self._categorize(w))
            if self.share.ticked:
                if self.share.measures and not self.policy.flowcon:
                    # efficiency per job for SLAQ's predictions (FlowCon's measurement)
                    w.ctl.measure(self.now, w.feed())
                self._allocate(w)
        MOVES[self.policy.moves](self, requests)

    def _categorize(self, w: Worker) -> list[Job]:
        requests = w.ctl.categorize_tick(self.now, w.feed())
        self.view_cache.pop(w.name, None)
        return [w.jobs[n] for n in requests]

    # -- migrations ------------------------------------------------------------------------------
    def move(self, job: Job, src: Worker, dst: Worker, kind: str) -> None:
        """Stop the job on ``src`` and start it on ``dst`` after checkpoint + restore + pod
        restart (``dst`` holds a reservation meanwhile)."""
        prof = job.profile
        cost = prof.checkpoint_seconds + prof.restore_seconds + self.cfg.restart_s
        self._leave(job, src)
        job.state = "migrating"
        src.inflight += 1
        dst.inflight += 1
        dst.reserved.add(job.spec.name)
        self.view_cache.pop(dst.name, None)
        self.migrating += 1
        self._count(dst)
        job.result.migrations.append(
            {"t": self.now, "kind": kind, "from": src.name, "to": dst.name, "seconds": cost}
        )
        self.pending_moves[job.spec.name] = (src.name, dst.name)
        self.push(self.now + cost, MIGRATED, job.spec.name)

    def _land(self, job: Job) -> None:
        src_name, dst_name = self.pending_moves.pop(job.spec.name)
        src, dst = self.workers[src_name], self.workers[dst_name]
        src.inflight -= 1
        dst.inflight -= 1
        dst.reserved.discard(job.spec.name)
        self.view_cache.pop(dst.name, None)
        self.migrating -= 1
        self._join(job, dst)
