"""The progress-aware policy's moves on a period (specon.core.move_plan.plan_moves, the
simulator's rule): the move that most reduces the predicted sum of completion times of its
source and target, net of what a move costs the job, is started through the migration
controller (so every safety rule and cap applies) when that net gain is positive. A job's
move costs what its earlier moves were measured to cost (``specon.io/move-cost-s`` on its Job
or bare pod, specon.core.move_cost.job_cost), or ``migration_cost_s`` until one is measured.
This replaces Algorithm 4's requests and Algorithm 5's rounds under that policy."""

from __future__ import annotations

import logging

from specon.core.move_cost import job_cost
from specon.core.move_plan import PlannedMove, plan_moves
from specon.core.qos_rules import migration_hold
from specon_manager.job_keys import pod_key
from specon_manager.kube import Kube, annotations_of, controller_ref, meta
from specon_manager.metrics import ManagerMetrics
from specon_manager.migration import (
    A_MOVE_COST,
    MigrationController,
    owner_of,
    parent_of,
    why_not_movable,
)
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState

log = logging.getLogger(__name__)
REASON = "progress"


class MovePlanner:
    def __init__(self, kube: Kube, state: ClusterState, controller: MigrationController,
                 settings: ManagerSettings, metrics: ManagerMetrics) -> None:
        self.kube = kube
        self.state = state
        self.controller = controller
        self.settings = settings
        self.metrics = metrics

    def run_once(self) -> list[PlannedMove]:
        """One round; returns the moves that were started."""
        # One move at a time: until it lands the heartbeats show the old layout.
        if not self.controller.leader or self.controller.in_flight():
            return []
        cordoned = self.controller.cordoned()
        nodes = self.state.node_loads(n for n in self.state.fresh_nodes() if n not in cordoned)
        pods = {pod_key(meta(p)["namespace"], meta(p)["name"]): p
                for p in self.controller.migratable_pods()}
        movable = set()
        cost: dict[str, float] = {}
        for node, rep in self.state.jobs():
            key = pod_key(rep.namespace, rep.pod)
            pod = pods.get(key)
            if pod is None or (pod.get("spec") or {}).get("nodeName") != node:
                continue
            # Its owner by name: a read per reported job, never a list of the cluster's Jobs.
            ref = controller_ref(pod)
            job = owner_of(self.kube, pod) if ref else None
            # Its own measured cost (on the object that outlives its pods), else the default.
            own = job_cost(annotations_of((job or {}) if ref else pod).get(A_MOVE_COST),
                           self.settings.migration_cost_s)
            if why_not_movable(pod, job, REASON, parent=parent_of(self.controller.kube, job)
                               ) is None and not migration_hold(rep.qos, rep.slack_s, own):
                movable.add(key)
                cost[key] = own
        busy = frozenset(self.controller.busy_nodes())
        started = []
        for mv in plan_moves(nodes, cost, frozenset(movable), busy, self.state.weights):
            reply = self.controller.start(pods[mv.job], reason=REASON, target=mv.target,
                                          predicted_gain_s=mv.gain_s, cost_s=cost[mv.job])
            log.info("move %s: %s -> %s (predicted gain %.0f s net of the %.0f s charged): %s %s",
                     mv.job, mv.source, mv.target, mv.gain_s, cost[mv.job], reply.decision,
                     reply.reason)
            if reply.decision == "migrate":
                started.append(mv)
        return started
