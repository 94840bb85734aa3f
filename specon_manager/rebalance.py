"""The rebalancer (SpeCon Algorithm 5) on a period: when every job is converged, move the most
recently converged job onto an idle or under-loaded worker, through the migration controller
(so every safety rule and cap applies). Jobs with a deadline: an at-risk one, or one with less
slack than ``migration_cost_s``, is not a candidate, and among the candidates the one with the
most slack moves first (specon.core.qos_rules; no deadline is infinite slack).

A job counts as converged-and-marked from the moment it was marked migrated (annotation
``specon.io/migrated-at``) or, when its agent never asked to move it (it was alone with its
converged peers), from the first heartbeat that reported it converged."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from specon.core.categorize import Category
from specon.core.qos_rules import migration_hold
from specon.core.rebalance import Move, PlacedJob, plan_rebalance
from specon.wire import JobReport
from specon_manager.job_keys import ANNOTATION_MIGRATION_ID, pod_key
from specon_manager.kube import Kube, annotations_of, controller_ref, meta
from specon_manager.metrics import ManagerMetrics
from specon_manager.migration import (
    A_MIGRATED_AT,
    A_REBALANCED,
    MigrationController,
    owner_of,
    parent_of,
    why_not_movable,
)
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState

log = logging.getLogger(__name__)


class Rebalancer:
    def __init__(self, kube: Kube, state: ClusterState, controller: MigrationController,
                 settings: ManagerSettings, metrics: ManagerMetrics,
                 clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.state = state
        self.controller = controller
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self._converged_since: dict[str, float] = {}

    def _settling(self, reported: list[tuple[str, JobReport]], pods: dict[str, dict[str, Any]],
                  now: float) -> bool:
        """The heartbeats do not show the cluster as the API does yet: a reported migratable job
        whose pod is gone (moved or ended), or a recent migration's replacement that no
        heartbeat reports. Planning on that view would see the old layout and move a second
        job onto the worker the first one just reached; wait a round instead."""
        keys = {pod_key(j.namespace, j.pod) for _, j in reported}
        for _, j in reported:
            if j.checkpointable and pod_key(j.namespace, j.pod) not in pods:
                log.debug("rebalance: %s/%s is reported but gone; waiting", j.namespace, j.pod)
                return True
        window = self.settings.heartbeat_interval_s * self.settings.stale_after_intervals
        for key, pod in pods.items():
            marks = annotations_of(pod)
            try:
                recent = now - float(marks.get(A_MIGRATED_AT, "-inf")) < window
            except ValueError:
                recent = False
            if ANNOTATION_MIGRATION_ID in marks and recent and key not in keys:
                log.debug("rebalance: replacement %s not reported yet; waiting", key)
                return True
        return False

    def run_once(self) -> list[Move]:
        """One round; returns the moves that were started."""
        if not self.controller.leader or self.controller.in_flight():
            return []
        self.metrics.rebalance_rounds.inc()
        now = self.clock()
        reported = self.state.jobs()
        cordoned = self.controller.cordoned()
        workers = [w for w in self.state.fresh_nodes() if w not in cordoned]
        seen = set()
        for _, j in reported:
            key = pod_key(j.namespace, j.pod)
            seen.add(key)
            if j.category is Category.CONVERGED or j.migrated:
                self._converged_since.setdefault(key, now)
            else:
                self._converged_since.pop(key, None)
        for key in set(self._converged_since) - seen:
            del self._converged_since[key]
        pods = {pod_key(meta(p)["namespace"], meta(p)["name"]): p
                for p in self.controller.migratable_pods()}
        owners: dict[str, dict[str, Any] | None] = {}  # per owned pod: its controller
        parents: dict[str, dict[str, Any] | None] = {}  # and that one's (a Job's JobSet)
        if self._settling(reported, pods, now):
            return []
        placed: list[PlacedJob] = []
        slack: dict[str, float] = {}
        for node, j in reported:
            key = pod_key(j.namespace, j.pod)
            pod = pods.get(key)
            job = None
            if pod is not None and controller_ref(pod) is not None:
                if key not in owners:
                    owners[key] = owner_of(self.kube, pod)
                job = owners[key]
            holder = job if job is not None else pod
            marks = annotations_of(holder) if holder is not None else {}
            at: float | None = self._converged_since.get(key)
            try:
                if A_MIGRATED_AT in marks:
                    at = float(marks[A_MIGRATED_AT])
            except ValueError:
                pass
            if job is not None and key not in parents:
                parents[key] = parent_of(self.kube, job)
            movable = pod is not None and why_not_movable(
                pod, job, "rebalance", self.settings.migrate_replicaset_pods,
                parents.get(key)) is None
            # An at-risk job, or one with less slack than a move costs, stays where it is.
            if movable and migration_hold(j.qos, j.slack_s, self.settings.migration_cost_s):
                movable = False
            if j.slack_s is not None:
                slack[key] = j.slack_s
            placed.append(PlacedJob(key, node, at, bool(marks.get(A_REBALANCED)), movable))
        # Among the candidates, the job with the most slack moves first (no deadline: infinite).
        moves = plan_rebalance(placed, workers, now, self.settings.min_balance, slack=slack)
        started: list[Move] = []
        for mv in moves:
            reply = self.controller.start(pods[mv.job], reason="rebalance", target=mv.target)
            outcome = "started" if reply.decision == "migrate" else (
                "observed" if reply.observed else "refused")
            self.metrics.rebalance_moves.labels(outcome).inc()
            log.info("rebalance %s: %s -> %s: %s %s", mv.job, mv.source, mv.target, outcome,
                     reply.reason)
            if outcome == "started":
                started.append(mv)
        return started
