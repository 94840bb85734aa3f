"""Each simulated job and worker as the simulator keeps them: progress, cores, attained CPU and
equal-share progress, integrated analytically between two events (each job's rate is
constant there), and the milestones reached on the way."""

from __future__ import annotations

from collections.abc import Sequence

from specon.core.categorize import JobState
from specon.core.flowcon import FlowConParams
from specon.core.node import JobView, NodeController
from specon.core.speedup import Curve
from specon.sim.model import JobResult
from specon.workload.models import JobSpec, Profile


class Job:
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

    def demand(self) -> float:
        """Cores the job's threads can keep busy (it cannot use more than its table's keys)."""
        return min(self.threads, self.curve.max_cores)

    def new_losses(self) -> list[float]:
        """The log lines written since the last call."""
        k = self.logged()
        out = list(self.observed[self.seen : k])
        self.seen = k
        return out


class Worker:
    __slots__ = ("cpus", "ctl", "inflight", "jobs", "last_t", "name", "reserved", "seen_speed",
                 "speed")

    def __init__(self, name: str, cpus: float, speed: float, params: FlowConParams,
                 alpha: float, seen_speed: float | None = None) -> None:
        self.name = name
        self.cpus = cpus
        self.speed = speed
        #: Its speed as the manager knows it (SimConfig.manager_view: label, measured, or 1).
        self.seen_speed = speed if seen_speed is None else seen_speed
        self.jobs: dict[str, Job] = {}
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

    def advance(self, t: float) -> None:
        """Bring its jobs' progress, equal-share progress and attained CPU up to ``t``, and
        note the milestones they passed (when, exactly, at the constant rate since then)."""
        dt = t - self.last_t
        if dt > 0:
            equal = self.cpus / max(len(self.jobs), 1)
            for job in self.jobs.values():
                job.fair += (dt * job.curve.at(min(job.demand(), equal)) * self.speed
                             / job.iter_cost)
                if job.rate > 0:
                    before = job.done
                    job.done = min(job.done + job.rate * dt, job.end_iter)
                    while job.milestones and job.milestones[0][0] <= job.done + 1e-9:
                        it, kind = job.milestones.pop(0)
                        at = self.last_t + max(0.0, it - before) / job.rate
                        if kind == "90":
                            job.result.reached_90_s = at
                        else:
                            job.result.target_reached_s = at
                job.attained += job.cores * dt
        self.last_t = t
