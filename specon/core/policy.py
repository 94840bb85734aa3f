"""Scheduling policies by name: the one registry the simulator, the agent, the manager and the
CLI look a policy up in (``specon simulate --policies``, ``specon-agent --policy``, the
manager's ``policy`` setting, the chart's ``manager.policy`` and ``agent.policy``).

The names say what a policy does; two were renamed (``specon+flowcon`` is ``progress``,
``specon`` is ``progress-equal-share``) and their old names are still accepted, with a warning,
until the next release (:data:`DEPRECATED_NAMES`, docs/upgrades.md).

A policy is a combination of named rules: where a new job goes (``placement``), how a node's
CPU is divided (``share``, with FlowCon's limits or not), and what happens at each interval
(``moves``). Each adapter keeps its own registry of the rules it can run (the simulator all of
them; the agent the node rules; the manager placement and moves) and refuses a policy naming a
rule it lacks, by name. A new policy is its rules plus a :func:`register` call.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

from specon import defaults

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    placement: str = "spread"  # "spread" (Kubernetes default), "specon" or "progress"
    share: str = "equal"  # "equal" (CFS), "progress", "las", "slaq", "dqoes", ...
    flowcon: bool = False
    specon: bool = False  # categories (Algorithm 3) at every interval
    moves: str = "none"  # "specon" (Algorithms 4-5), "progress" (gain beats cost) or "none"
    thread_hint: bool = False  # jobs that use the SDK run as many threads as their limit
    description: str = ""

    @property
    def asks_to_move(self) -> bool:
        """A worker asks the manager to move its converged jobs at once (Algorithm 3's request,
        answered by Algorithm 4); other move rules are planned by the manager alone."""
        return self.moves == "specon"

POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("default", description="Kubernetes default placement, equal CFS shares (DS/NA)"),
        Policy("flowcon", flowcon=True, description="default placement + FlowCon limits"),
        Policy("paper-specon", placement="specon", specon=True, moves="specon",
               description="the research's SpeCon: Algorithms 3-5 (placement by job counts "
               "per capacity, migration of converged jobs, rebalancing)"),
        Policy("paper", placement="specon", specon=True, moves="specon", flowcon=True,
               description="the research's full system: SpeCon + FlowCon"),
        Policy("progress-equal-share", placement="progress", specon=True, moves="progress",
               description="progress-aware placement and moves, equal CPU shares on a node"),
        Policy("progress", placement="progress", share="progress", specon=True,
               moves="progress", thread_hint=True,
               description="the full system as shipped: progress-aware placement, CPU on a "
               "node by work left, thread hints, moves that pay for themselves"),
        Policy("las", share="las", description="least attained service first (Tiresias-like)"),
        Policy("slaq", share="slaq", description="greedy CPU to the largest predicted loss drop"),
        Policy("dqoes", share="dqoes",
               description="CPU first to jobs predicted to miss their target loss (DQoES)"),
        Policy("deadline", share="deadline",
               description="CPU first to jobs predicted to miss their deadline (QoS-oriented)"),
        Policy("agent-qos", share="agent-qos",
               description="the node agent's QoS rule: soft caps for targets and deadlines"),
        Policy("oracle", description="clairvoyant pooled SRPT: headroom reference, not a rival"),
    )
}

#: Old policy names, accepted until the next release, and the names they have now. The one
#: table every place that reads a policy name goes through (:func:`canonical`).
DEPRECATED_NAMES: dict[str, str] = {
    "specon+flowcon": "progress",
    "specon": "progress-equal-share",
}


def register(policy: Policy) -> Policy:
    """Add (or replace) a policy under its name."""
    POLICIES[policy.name] = policy
    return policy


def renamed(name: str) -> str | None:
    """The one-line notice for an old name (:data:`DEPRECATED_NAMES`), None for any other."""
    new = DEPRECATED_NAMES.get(name)
    if new is None:
        return None
    return (f"policy {name!r} is now called {new!r}; the old name is accepted until the next "
            f"release (docs/upgrades.md)")


def canonical(name: str, stacklevel: int = 2) -> str:
    """The name ``name`` has now: an old one (:data:`DEPRECATED_NAMES`) gives its new one, with
    a DeprecationWarning and a logged warning that names it; any other comes back as it is
    (:func:`lookup` judges it). ``stacklevel`` is the warning's, as in warnings.warn."""
    notice = renamed(name)
    if notice is None:
        return name
    warnings.warn(notice, DeprecationWarning, stacklevel=stacklevel)
    log.warning("%s", notice)
    return DEPRECATED_NAMES[name]


def lookup(name: str) -> Policy:
    """The policy of that name (an old name gives its new policy, with :func:`canonical`'s
    warning); ValueError naming the known ones otherwise."""
    try:
        return POLICIES[canonical(name, stacklevel=3)]
    except KeyError:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})") from None


def missing_rules(policy: Policy, placements: frozenset[str] = frozenset(),
                  shares: frozenset[str] = frozenset(), moves: frozenset[str] = frozenset(),
                  ) -> list[str]:
    """The rules of ``policy`` an adapter that runs these ones lacks ("share rule 'las'");
    pass only the kinds the adapter runs."""
    out = []
    for kind, name, known in (("placement", policy.placement, placements),
                              ("share", policy.share, shares), ("moves", policy.moves, moves)):
        if known and name not in known:
            out.append(f"{kind} rule {name!r} (this side runs: {', '.join(sorted(known))})")
    return out


#: The policy that ships (docs/parameters.md has the evidence and the rule that chose it).
SHIPPED = defaults.POLICY
#: The research's full system, kept for comparison.
RESEARCH = "paper"
