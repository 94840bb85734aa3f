"""The moves a policy makes at each interval, decided by the core and started through the
simulator: Algorithm 4 for each reallocation request, Algorithm 5's rebalancing, and the
progress-aware policy's moves whose predicted gain beats their cost."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specon.core.move_plan import plan_moves
from specon.core.rebalance import PlacedJob, plan_rebalance
from specon.core.scoring import decide_reallocation
from specon.sim.engine import inputs
from specon.sim.engine.bookkeeping import Job, Worker

if TYPE_CHECKING:
    from specon.sim.engine.loop import Simulator


def can_move(sim: Simulator, src: Worker, dst: Worker) -> bool:
    """Within the caps on migrations in flight, per node and in total."""
    cap = sim.cfg.max_inflight_per_node
    return (
        src.inflight < cap and dst.inflight < cap
        and sim.migrating < sim.cfg.max_inflight_total
    )


def mark(sim: Simulator, job: Job) -> None:
    """Remember when the job was marked migrated (its converged duration starts here)."""
    sim.marked_at[job.spec.name] = sim.now
    job.result.marked_s = sim.now


def reallocate(sim: Simulator, job: Job) -> None:
    """Algorithm 4 for one reallocation request (specon.core.scoring.decide_reallocation,
    the manager's rule)."""
    src = sim.workers[job.worker or ""]
    if job.cat.migrated or job.state != "running":
        return
    d = decide_reallocation(inputs.views(sim, inputs.fits(sim, job)), sim.cfg.weights,
                            src.name, job.cat.category, movable=job.spec.migratable)
    if d.decision == "wait":
        return
    dst = sim.workers[d.target] if d.decision == "migrate" and d.target else None
    if dst is not None and not can_move(sim, src, dst):
        return  # caps reached: the request is raised again at the next interval
    src.ctl.mark_migrated(job.spec.name)
    mark(sim, job)
    if dst is not None:
        sim.move(job, src, dst, "migrate")


def rebalance(sim: Simulator) -> None:
    """Algorithm 5 (specon.core.rebalance.plan_rebalance) when no migration is in flight."""
    running = [j for j in sim.jobs.values() if j.state in ("running", "migrating")]
    if not running or sim.migrating:
        return
    placed = [
        PlacedJob(
            name=j.spec.name, worker=j.worker or "",
            migrated_at=sim.marked_at.get(j.spec.name) if j.cat.migrated else None,
            rebalanced=j.rebalanced, movable=j.spec.migratable,
        )
        for j in running
    ]
    moves = plan_rebalance(placed, list(sim.workers), sim.now, sim.cfg.min_balance)
    for mv in moves:
        job = sim.jobs[mv.job]
        src, dst = sim.workers[mv.source], sim.workers[mv.target]
        if job.state != "running" or not can_move(sim, src, dst):
            continue
        job.rebalanced = True
        sim.move(job, src, dst, "rebalance")


def progress_moves(sim: Simulator) -> None:
    """Moves whose predicted gain beats their cost (specon.core.move_plan.plan_moves)."""
    cfg = sim.cfg
    room = cfg.max_inflight_total - sim.migrating
    if room <= 0:
        return
    busy = frozenset(w.name for w in sim.workers.values()
                     if w.inflight >= cfg.max_inflight_per_node)
    nodes = [inputs.reserved_node(sim, w) for w in sim.workers.values()]
    movable = frozenset(j.spec.name for j in sim.jobs.values()
                        if j.state == "running" and j.spec.migratable)
    cost = {j.spec.name: j.profile.checkpoint_seconds + j.profile.restore_seconds
            + cfg.restart_s for j in sim.jobs.values() if j.state == "running"}
    for mv in plan_moves(nodes, cost, movable, busy, cfg.weights, limit=room,
                         margin=cfg.move_margin):
        job = sim.jobs[mv.job]
        src, dst = sim.workers[mv.source], sim.workers[mv.target]
        if job.state == "running" and can_move(sim, src, dst):
            sim.move(job, src, dst, "migrate")
