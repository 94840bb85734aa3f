"""What a policy sees of the simulated cluster, in the core's terms: each job's work left and
load (JobLoad, NodeLoad) as the policy can know it, worker views for Algorithm 4, urgency for
targets and deadlines, SLAQ's predicted value. The simulator turns its state into these, and
the core's rules decide on them."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from specon.core.job_loads import new_job_load, reported_load, steps_left
from specon.core.predict import fit_curve
from specon.core.progress import (
    CANDIDATES,
    KIND_NODES,
    JobLoad,
    NodeLoad,
    behind_equal_share,
    least_loaded,
)
from specon.core.scoring import WorkerView, worker_view
from specon.core.urgency import GIVEN_UP, ON_TRACK, Assessment, assess, urgency
from specon.sim.engine.bookkeeping import Job, Worker

if TYPE_CHECKING:
    from specon.sim.engine.loop import Simulator
    from specon.sim.model import SimConfig

#: Where a job that stops at its target is expected to stop before its curve can be fitted
#: (as a share of its declared steps: most of a loss's fall comes early, docs/mission).
TARGET_PRIOR = 0.3


def hints(sim: Simulator, job: Job) -> bool:
    """Jobs that use the SDK (the checkpointable ones) follow the thread hint."""
    return sim.policy.thread_hint and job.spec.migratable


def hinted_caps(sim: Simulator, w: Worker, jobs: list[Job]) -> list[float]:
    """What each job could use: with the hint, as many threads as the worker has."""
    return [min(w.cpus, j.curve.max_cores) if hints(sim, j) else j.demand() for j in jobs]


def demand_on(job: Job, w: Worker) -> float:
    """Cores the job would keep busy on ``w``: the threads it was told, or the worker's cores."""
    told = job.spec.cores
    return min(told if told is not None else w.cpus, job.curve.max_cores)


def steps_to_target(job: Job) -> float | None:
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


def work_left(job: Job) -> float:
    """Seconds of work left on one speed-1 core, as the policy can know it: its steps left as
    a node agent estimates them (specon.core.job_loads.steps_left: to the declared total, or,
    without one, as much again as done so far; never from the total it does not declare)."""
    steps = steps_left(job.done, job.profile.iterations if job.total_known else None)
    if job.spec.stop_at_target and job.spec.target_loss is not None:
        k = job.logged()
        if job.target_fit[0] != k:  # refit only when the log has grown
            left = steps_to_target(job)
            job.target_fit = (k, None if left is None else job.done + left)
        at = job.target_fit[1]
        if at is None:  # no fit yet: most of a loss's fall comes in its first 30%
            at = TARGET_PRIOR * job.profile.iterations
        steps = min(steps, max(0.0, at - job.done))
    return steps * job.cost_seen


def starved(job: Job) -> bool:
    """Behind what equal shares would have given it (specon.core.progress.behind_equal_share),
    its total steps as the policy knows them."""
    total = job.done + work_left(job) / max(job.cost_seen, 1e-12)
    return behind_equal_share(job.done, job.fair, total)


def load(sim: Simulator, job: Job, w: Worker) -> JobLoad:
    if hints(sim, job):
        cap, threads = min(w.cpus, job.curve.max_cores), None
    else:
        cap = threads = min(demand_on(job, w), w.cpus)
    return JobLoad(job.spec.name, work_left(job), job.curve, cap, job.cat.category,
                   threads, starved(job), job.done * job.cost_seen,
                   guessed=not job.total_known)


def node(sim: Simulator, w: Worker, extra: Sequence[Job] = ()) -> NodeLoad:
    jobs = [load(sim, j, w) for j in (*w.jobs.values(), *extra)]
    return NodeLoad(w.name, w.cpus, w.speed, tuple(jobs))


def reserved_node(sim: Simulator, w: Worker) -> NodeLoad:
    """The worker with the jobs migrating to it counted in (as placement and moves see it:
    :func:`manager_node` under ``SimConfig.manager_view``)."""
    extra = [sim.jobs[n] for n in w.reserved]
    return manager_node(sim, w, extra) if sim.cfg.manager_view else node(sim, w, extra)


def seen_speed(cfg: SimConfig, seed: int | None, name: str, speed: float) -> float:
    """A worker's speed as the manager knows it (``SimConfig.manager_view``): its label's
    (the truth), else its agent's probe's (specon_agent.speed_probe: the truth off by up to
    ``speed_error`` of it, drawn per worker and seed), else 1 (not known)."""
    if not cfg.manager_view or cfg.labelled_speeds:
        return speed
    if not cfg.measured_speeds:
        return 1.0
    return speed * (1.0 + cfg.speed_error * random.Random(f"{seed}:{name}:speed").uniform(-1, 1))


def speeds_known(sim: Simulator) -> bool:
    """Whether the manager knows each worker's speed (labelled or measured)."""
    return sim.cfg.labelled_speeds or sim.cfg.measured_speeds


def manager_node(sim: Simulator, w: Worker, extra: Sequence[Job] = ()) -> NodeLoad:
    """The worker as the manager knows it (specon_manager.state.node_loads): each job as its
    agent reports it (specon.core.job_loads.reported_load: linear up to the cores it keeps
    busy, its work in CPU-seconds of this worker), times the worker's speed as the manager
    knows it (:func:`seen_speed`)."""
    speed = w.seen_speed
    scale = speed / w.speed  # speed-1 seconds -> this worker's CPU-seconds -> as known
    jobs = [reported_load(j.spec.name, work_left(j) * scale, w.cpus, j.cat.category,
                          attained=j.done * j.cost_seen * scale, cap=demand_on(j, w),
                          guessed=not j.total_known)
            for j in (*w.jobs.values(), *extra)]
    return NodeLoad(w.name, w.cpus, speed, tuple(jobs))


def manager_placement_load(sim: Simulator, nodes: Sequence[NodeLoad], job: Job) -> JobLoad:
    """A new job as the manager's extender sees it (specon_manager.state): the typical job of
    its kind (its profile, as a pod's image) among the jobs of ``nodes`` where the workers'
    speeds are known (labelled or measured), else the typical job of the CANDIDATES least
    loaded (specon.core.job_loads.new_job_load)."""
    known = speeds_known(sim)
    kind = job.spec.profile
    same: list[JobLoad] = []
    hosts = 0
    for n in nodes if known else ():
        if hosts == KIND_NODES:  # as the manager reads them: KIND_NODES nodes at most
            break
        mine = [j for j in n.jobs if j.name in sim.jobs and sim.jobs[j.name].spec.profile == kind]
        if mine:
            same += mine
            hosts += 1
    return new_job_load(same, least_loaded(nodes, CANDIDATES), max(n.cpus for n in nodes),
                        by_cores=known)


def fits(sim: Simulator, job: Job) -> list[Worker]:
    """Workers that can hold the job: a job told its thread count needs that many CPUs; one
    that takes the cores it sees (as PyTorch does) runs anywhere."""
    if job.spec.cores is None:
        return list(sim.workers.values())
    return [w for w in sim.workers.values() if w.cpus >= job.max_cores]


def placement_load(sim: Simulator, job: Job) -> JobLoad:
    """A new job as placement sees it (its cap depends on the worker: the largest)."""
    biggest = max(w.cpus for w in fits(sim, job))
    cap = min(biggest, job.curve.max_cores) if hints(sim, job) else min(
        demand_on(job, max(fits(sim, job), key=lambda w: w.cpus)), biggest)
    return JobLoad(job.spec.name, work_left(job), job.curve, cap, job.cat.category,
                   guessed=not job.total_known)


def views(sim: Simulator, workers: Sequence[Worker]) -> list[WorkerView]:
    """Algorithm 4's view of each worker (cached until its jobs, categories or load change)."""
    out = []
    for w in workers:
        cached = sim.view_cache.get(w.name)
        if cached is not None:
            out.append(cached)
            continue
        used = sim.record.cpu_in_use(w.name) / w.cpus
        view = worker_view(w.name, w.ctl.counts(), len(w.reserved), used,
                           capacity=w.cpus * w.speed)
        sim.view_cache[w.name] = view
        out.append(view)
    return out


def qos_level(sim: Simulator, job: Job, w: Worker, to_target: bool) -> int:
    """The job's urgency (specon.core.urgency): to its target loss, predicted from its
    loss curve so far (``to_target``: ``dqoes``), or to its declared end (``deadline``)."""
    spec = job.spec
    if to_target:
        if spec.target_loss is None:
            return ON_TRACK
        if job.result.target_reached_s is not None:
            return GIVEN_UP
        steps = steps_to_target(job)
    else:
        if spec.deadline_s is None:
            return ON_TRACK
        # The job's declared length (it reports its total steps), not where it will stop.
        steps = max(0.0, job.profile.iterations - job.done)
    left = (spec.submit_s + spec.deadline_s - sim.now) if spec.deadline_s else math.inf
    best = job.profile.speed(job.max_cores) * w.speed / job.iter_cost
    return urgency(steps, job.rate, best, left)


def agent_qos_caps(sim: Simulator, w: Worker, jobs: list[Job],
                   caps: list[float]) -> list[float]:
    """The node agent's rule (specon_agent/qos_tracker.py, docs/qos.md): each job with a
    target or deadline assessed from its rate and cores so far, the worker divided by strict
    priority into limits; the others keep ``caps`` (FlowCon's, or the node rule's shares)."""
    judged: dict[str, Assessment | None] = {}
    for j in jobs:
        spec = j.spec
        if spec.target_loss is None and spec.deadline_s is None:
            judged[spec.name] = None
            continue
        reached = j.result.target_reached_s is not None
        if spec.target_loss is not None:
            steps = None if reached else steps_to_target(j)
        else:
            steps = max(0.0, j.profile.iterations - j.done)
        left = (spec.submit_s + spec.deadline_s - sim.now) if spec.deadline_s else math.inf
        judged[spec.name] = assess(steps, j.rate, j.cores, j.max_cores, left, reached)
    limits, _ = w.ctl.judge_qos(judged, w.cpus, sim.cfg.qos_floor_cores)
    out = []
    for j, c in zip(jobs, caps, strict=True):
        lim = limits[j.spec.name]
        out.append(c if lim is None else min(j.max_cores, lim * w.cpus))
    return out


def slaq_value(job: Job) -> float:
    """Predicted normalised loss reduction per unit of relative speed (optimistic if new)."""
    if job.last_eff is None:
        return 1e6
    cores = max(job.cores, 1e-3)
    return job.last_eff * cores / max(job.profile.speed(cores), 1e-9)
