"""The rules a policy is made of, by name (specon.core.policy.Policy names them): how a worker's
CPU is shared among its jobs, where a new job goes, and what moves run at each interval. A
simulator-only share rule registers here; a node share rule of the core (NODE_SHARES) runs
through the worker's node controller, as the agent runs it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from specon.core.node import qos_limits_over
from specon.core.placement import choose_node
from specon.core.scoring import choose_host
from specon.core.threads import threads_for_limit
from specon.sim.alloc import by_priority, greedy_marginal, waterfill
from specon.sim.engine import inputs, moves
from specon.sim.engine.bookkeeping import Job, Worker

if TYPE_CHECKING:
    from specon.sim.engine.loop import Simulator

#: A share rule divides one worker: (simulator, worker, its jobs, each job's cap) -> cores.
ShareFn = Callable[["Simulator", Worker, list[Job], list[float]], list[float]]
#: A placement rule picks a worker for a new job among those that fit it.
PlaceFn = Callable[["Simulator", Job, list[Worker]], str]
#: A move rule runs at each interval after the categories (may start migrations).
MoveFn = Callable[["Simulator", list[Job]], None]


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


# -- share rules --------------------------------------------------------------------------------
@register_share("equal")
def _equal(sim: Simulator, w: Worker, jobs: list[Job], caps: list[float]) -> list[float]:
    return waterfill(w.cpus, caps, [1.0] * len(jobs))


@register_share("las", ticked=True)
def _las(sim: Simulator, w: Worker, jobs: list[Job], caps: list[float]) -> list[float]:
    th = sim.cfg.las_thresholds
    return by_priority(w.cpus, caps, [sum(1 for x in th if j.attained >= x) for j in jobs])


@register_share("dqoes", ticked=True)
def _dqoes(sim: Simulator, w: Worker, jobs: list[Job], caps: list[float]) -> list[float]:
    return by_priority(w.cpus, caps, [inputs.qos_level(sim, j, w, to_target=True) for j in jobs])


@register_share("deadline", ticked=True)
def _deadline(sim: Simulator, w: Worker, jobs: list[Job], caps: list[float]) -> list[float]:
    return by_priority(w.cpus, caps,
                       [inputs.qos_level(sim, j, w, to_target=False) for j in jobs])


@register_share("agent-qos", ticked=True)
def _agent_qos(sim: Simulator, w: Worker, jobs: list[Job], caps: list[float]) -> list[float]:
    return waterfill(w.cpus, inputs.agent_qos_caps(sim, w, jobs, caps), [1.0] * len(jobs))


@register_share("slaq", ticked=True, measures=True)
def _slaq(sim: Simulator, w: Worker, jobs: list[Job], caps: list[float]) -> list[float]:
    return greedy_marginal(w.cpus, caps, [inputs.slaq_value(j) for j in jobs],
                           [j.profile.speed for j in jobs], sim.cfg.slaq_quantum)


def node_rule(sim: Simulator, w: Worker, jobs: list[Job], caps: list[float]) -> list[float]:
    """A node share rule of the core (specon.core.node.NODE_SHARES: the progress-aware
    policy's, a test's), run by the worker's node controller as the agent runs it; the shares
    are limits, and jobs that take the hint run as many threads as their limit allows. With
    ``qos_over_shares``, the QoS limits of jobs with a target or deadline override the shares,
    as on the agent (docs/qos.md)."""
    del caps
    shares = w.ctl.divide(sim.policy.share, w.cpus, [inputs.load(sim, j, w) for j in jobs],
                          sim.cfg.weights, sim.cfg.fair_share)
    limits = [shares[j.spec.name] for j in jobs]
    if qos_limits_over(sim.policy.share, sim.cfg.qos_over_shares):  # as the agent decides
        limits = inputs.agent_qos_caps(sim, w, jobs, limits)
    cores = waterfill(w.cpus, [min(c, lim) for c, lim in
                               zip(inputs.hinted_caps(sim, w, jobs), limits, strict=True)],
                      [1.0] * len(jobs))
    for j, lim in zip(jobs, limits, strict=True):
        if inputs.hints(sim, j):  # the agent's rule for the hint (specon.core.threads)
            j.threads = min(threads_for_limit(lim, w.cpus), j.curve.max_cores)
    return cores


#: The rule a policy whose share rule is the core's runs (re-divided at every interval).
NODE_RULE = ShareRule(node_rule, ticked=True)


# -- placement rules ----------------------------------------------------------------------------
def _spread(sim: Simulator, job: Job, fits: list[Worker]) -> str:
    """Kubernetes' default: least requested (a pod without requests counts 100m), random
    among ties."""
    def requested(w: Worker) -> float:
        return (len(w.jobs) + len(w.reserved)) * sim.cfg.request_cpu / w.cpus

    best = min(requested(w) for w in fits)
    ties = [w.name for w in fits if requested(w) <= best + 1e-12]
    return ties[0] if len(ties) == 1 else sim.rng.choice(sorted(ties))


def _specon_place(sim: Simulator, job: Job, fits: list[Worker]) -> str:
    """Algorithm 4 for a new job (specon.core.scoring.choose_host)."""
    return choose_host(inputs.views(sim, fits), sim.cfg.weights).target or fits[0].name


def _progress_place(sim: Simulator, job: Job, fits: list[Worker]) -> str:
    """Where the job adds the least predicted completion (specon.core.placement.choose_node)."""
    nodes = [inputs.reserved_node(sim, w) for w in fits]
    if sim.cfg.manager_view:
        load = inputs.manager_placement_load(sim, nodes, job)
    elif len(fits) == 1:
        load = inputs.load(sim, job, fits[0])
    else:
        load = inputs.placement_load(sim, job)
    load = replace(load, movable=job.spec.migratable)
    return choose_node(nodes, load, sim.cfg.weights) or fits[0].name


# -- move rules ---------------------------------------------------------------------------------
def _no_moves(sim: Simulator, requests: list[Job]) -> None:
    del sim, requests


def _specon_moves(sim: Simulator, requests: list[Job]) -> None:
    """Algorithm 4 for each reallocation request, then Algorithm 5."""
    for job in requests:
        moves.reallocate(sim, job)
    if sim.cfg.rebalance:
        moves.rebalance(sim)


def _progress_moves(sim: Simulator, requests: list[Job]) -> None:
    del requests
    moves.progress_moves(sim)


PLACEMENTS.update(spread=_spread, specon=_specon_place, progress=_progress_place)
MOVES.update(none=_no_moves, specon=_specon_moves, progress=_progress_moves)
