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

import numpy as np
import numpy.typing as npt

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
    return float(qos_values(np.array([node.free_cpus]), np.array([float(node.at_risk)]),
                            most_free)[0])


def qos_values(free_cpus: npt.NDArray[np.float64], at_risk: npt.NDArray[np.float64],
               most_free: float) -> npt.NDArray[np.float64]:
    """:func:`qos_value` of many nodes at once (free CPUs below 0 count as 0)."""
    free = np.maximum(0.0, free_cpus)
    share = free / most_free if most_free > 0 else np.zeros_like(free)
    return share - AT_RISK_PENALTY * at_risk


def qos_placement_scores(nodes: Sequence[NodeQos], max_score: int = 10) -> dict[str, int]:
    """Extender priorities 0..max_score for a pod with a deadline or a target (the rule is
    :func:`qos_priorities`'s). Unavailable nodes get 0, as in the default scoring."""
    scores = qos_priorities(np.array([n.free_cpus for n in nodes], dtype=np.float64),
                            np.array([n.at_risk for n in nodes], dtype=np.float64),
                            np.array([n.available for n in nodes], dtype=bool), max_score)
    return dict(zip((n.name for n in nodes), scores.tolist(), strict=True))


def qos_priorities(free_cpus: npt.NDArray[np.float64], at_risk: npt.NDArray[np.float64],
                   available: npt.NDArray[np.bool_], max_score: int = 10,
                   ) -> npt.NDArray[np.int64]:
    """Positionally, from each node's free CPUs, at-risk jobs and availability (no fresh
    heartbeat: 0). Each available node's :func:`qos_value` is mapped
    linearly onto 1..max_score (the best gets max_score, the worst 1; all equal: all
    max_score)."""
    out = np.zeros(len(free_cpus), dtype=np.int64)
    if not available.any():
        return out
    free = free_cpus[available]
    value = qos_values(free, at_risk[available], max(0.0, float(free.max())))
    lo, hi = float(value.min()), float(value.max())
    if hi - lo < 1e-12:
        out[available] = max_score
    else:
        out[available] = 1 + np.round((max_score - 1) * ((value - lo) / (hi - lo))).astype(
            np.int64)
    return out


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
