"""What the agent's control loop runs under: the parts of the settings the loop itself uses
(:class:`LoopConfig`), and which scheduling policies it can run (:func:`agent_policy`)."""

from __future__ import annotations

from dataclasses import dataclass

from specon import defaults
from specon.core.flowcon import FlowConParams
from specon.core.node import NODE_SHARES
from specon.core.policy import Policy, lookup, missing_rules


@dataclass(frozen=True)
class LoopConfig:
    """The parts of the settings the loop itself uses."""

    node: str
    alpha: float = defaults.ALPHA
    interval_s: float = defaults.INTERVAL_S
    flowcon_alpha: float | None = defaults.FLOWCON_ALPHA
    flowcon_beta: float = defaults.FLOWCON_BETA
    flowcon_interval_s: float | None = None
    flowcon_max_interval_s: float = defaults.FLOWCON_MAX_INTERVAL_S
    poll_s: float = 2.0
    tail_bytes: int = 1 << 20
    restore_on_exit: bool = True
    #: The largest checkpoint data file the agent hashes (bytes): a bigger one is refused
    #: before it is read, whatever its manifest says (docs/security.md).
    checkpoint_max_bytes: int = 64 << 30
    #: The longest one pass waits for checkpoint hashes, done by a worker thread (seconds).
    checkpoint_hash_budget_s: float = 0.5
    #: /healthz fails once the loop has not completed a pass for this long (seconds; None:
    #: three poll intervals, at least 30 s: specon_agent.health.stall_bound).
    stall_s: float | None = None
    #: Quality targets and deadlines: how often they are judged, the window of the step rate,
    #: and the lowest limit (cores) a job that can spare CPU is held at.
    qos_interval_s: float = 15.0
    qos_window_s: float = 30.0
    qos_floor_cores: float = defaults.QOS_FLOOR_CORES
    #: Lay the QoS limits over a node share rule's too (specon.core.node.qos_limits_over).
    qos_over_shares: bool = False
    #: The scheduling policy (specon.core.policy) whose node rules the agent runs: FlowCon or
    #: a node share rule, and whether it asks the manager to move converged jobs.
    policy: str = defaults.POLICY

    def flow_params(self) -> FlowConParams:
        itval = self.flowcon_interval_s or self.interval_s
        return FlowConParams(
            alpha=self.flowcon_alpha or self.alpha, itval_s=itval, beta=self.flowcon_beta,
            max_itval_s=max(self.flowcon_max_interval_s, itval))


#: The node share rules the agent runs besides the core's (specon.core.node.NODE_SHARES):
#: CFS's equal shares (with FlowCon's limits when the policy says so) and the QoS rule, which
#: the agent applies over any policy.
OWN_SHARES = frozenset({"equal", "agent-qos"})


def agent_policy(name: str) -> Policy:
    """The policy of that name, if the agent can run its node rules; ValueError (one line,
    naming what is missing) otherwise."""
    policy = lookup(name)
    missing = missing_rules(policy, shares=OWN_SHARES | frozenset(NODE_SHARES))
    if missing:
        raise ValueError(f"policy {name!r}: the agent cannot run its {missing[0]}")
    return policy
