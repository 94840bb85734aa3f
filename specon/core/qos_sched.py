"""Quality targets and deadlines in the manager's decisions (pure; docs/manager.md, "QoS").

Three rules, each for jobs that state a deadline or a target loss; jobs without one are
decided exactly as before:

- **Placement** (:func:`qos_placement_scores`): a new pod with a deadline or a target goes where
  it can meet it: nodes with more free CPU (capacity minus load, from heartbeats) score
  higher, and every job a node reports *at-risk* costs it more than the whole free-CPU range,
  so a node with fewer at-risk jobs always wins and free CPU decides among equals.
- **Staying** (:func:`migration_hold`): a job reported at-risk, or whose slack is smaller than
  a migration's expected cost, is not moved: the move would make it late.
- **Choosing whom to rebalance**: :func:`specon.core.rebalance.plan_rebalance` takes the jobs'
  slack and moves the candidate with the most slack first (no deadline: infinite slack).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: What each at-risk job on a node costs it, in units of the free-CPU range (0..1): more than
#: 1, so that no amount of free CPU makes up for an at-risk job.
AT_RISK_PENALTY = 2.0


@dataclass(frozen=True, slots=True)
class NodeQos:
    """What the placement of a job with a deadline needs to know of one node."""

    name: str
    free_cpus: float = 0.0  # capacity minus load, in cores (never below 0)
    at_risk: int = 0  # jobs the node reports at-risk
    available: bool = True  # False: no fresh heartbeat (unknown is never free)


def qos_value(node: NodeQos, most_free: float) -> float:
    """free / most_free - AT_RISK_PENALTY * at_risk: higher is better."""
    free = max(0.0, node.free_cpus)
    share = free / most_free if most_free > 0 else 0.0
    return share - AT_RISK_PENALTY * node.at_risk


def qos_placement_scores(nodes: Sequence[NodeQos], max_score: int = 10) -> dict[str, int]:
    """Extender priorities 0..max_score for a pod with a deadline or a target (the rule is
    :func:`qos_priorities`'s). Unavailable nodes get 0, as in the default scoring."""
    values = [(n.free_cpus, n.at_risk) if n.available else None for n in nodes]
    return dict(zip((n.name for n in nodes), qos_priorities(values, max_score), strict=True))


def qos_priorities(values: Sequence[tuple[float, int] | None], max_score: int = 10) -> list[int]:
    """Positionally: ``values[i]`` is a node's (free CPUs, at-risk jobs), None when it has no
    fresh heartbeat (it gets 0). Each available node's :func:`qos_value` is mapped linearly
    onto 1..max_score (the best gets max_score, the worst 1; all equal: all max_score)."""
    avail = [v for v in values if v is not None]
    if not avail:
        return [0] * len(values)
    most_free = max(max(0.0, free) for free, _ in avail)
    value = [None if v is None else qos_value(NodeQos("", v[0], v[1]), most_free)
             for v in values]
    present = [v for v in value if v is not None]
    lo, hi = min(present), max(present)
    k = max_score - 1
    if hi - lo < 1e-12:
        return [0 if v is None else max_score for v in value]
    return [0 if v is None else 1 + round(k * ((v - lo) / (hi - lo))) for v in value]
def migration_hold(qos: str, slack_s: float | None, cost_s: float) -> str | None:
    """Why a job must not be moved now (a sentence for the reply), or None.

    ``qos`` and ``slack_s`` are the job's latest report; ``cost_s`` is what a migration is
    expected to cost it (checkpoint, eviction, placement, restore)."""
    if qos == "at-risk":
        return ("the job is at risk of missing its deadline or target: a migration (about "
                f"{cost_s:.0f} s) would make it later")
    if slack_s is not None and slack_s < cost_s:
        return (f"the job's slack ({slack_s:.0f} s) is less than a migration's expected cost "
                f"({cost_s:.0f} s)")
    return None
