"""The migration controller: the public face of the migration phases (specon_manager.migration
package docstring). It answers the agents' reallocation requests and the planners' moves,
runs the dispatcher over the migrations in flight once a pass, and rebuilds them from their
records after a restart or a change of leader."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from specon.wire import CheckpointRequest, ReallocationReply, ReallocationRequest
from specon_manager.kube import (
    CUSTOM_KINDS,
    OWNERS,
    Kube,
    KubeError,
    annotations_of,
    owner_path,
    pod_path,
)
from specon_manager.lead_lost import hand_over, step_failed
from specon_manager.metrics import ManagerMetrics
from specon_manager.migration.context import PhaseContext, log
from specon_manager.migration.cost import measure
from specon_manager.migration.dispatch import step
from specon_manager.migration.record import A_MIGRATION, L_MIGRATING, PHASES, Migration
from specon_manager.migration.reserve import reserve
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState, Reservation, pod_key


class MigrationController(PhaseContext):
    """Runs migrations; thread-safe (agents' requests and the reconcile loop both call it)."""

    def __init__(self, kube: Kube, state: ClusterState, settings: ManagerSettings,
                 metrics: ManagerMetrics, clock: Callable[[], float] = time.time) -> None:
        super().__init__(kube, state, settings, metrics, clock)
        self._ready = False

    # -- what the API asks -------------------------------------------------------------------
    def ready(self) -> bool:
        """Restored and leading: only the leader is ready, so a Service sends heartbeats and
        extender calls to it alone (docs/manager.md)."""
        return self._ready and self.leader

    def reallocate(self, node: str, req: ReallocationRequest) -> ReallocationReply:
        if not self.leader:
            return ReallocationReply(decision="refused", reason="this replica is not the leader")
        busy = self._busy_answer(node, req)
        if busy is not None:
            return busy
        pod = self.kube.get(pod_path(req.namespace, req.pod))
        if pod is None:
            return ReallocationReply(decision="refused", reason="no such pod")
        if (pod.get("spec") or {}).get("nodeName") != node:
            return ReallocationReply(decision="refused",
                                     reason=f"the pod does not run on node {node}")
        if not self.policy.asks_to_move:
            # This policy's moves are planned here; an agent on another policy stops asking.
            return ReallocationReply(decision="stay", target=node, migrated=True, reason=(
                f"policy {self.policy.name} moves jobs by the manager's plan, not on request"))
        return self.start(pod, reason="converged")

    def _busy_answer(self, node: str, req: ReallocationRequest) -> ReallocationReply | None:
        """The refusal :meth:`start` would reach after several API round trips, from memory
        alone: the asking node is a migration's source or target (at most one move per node).
        No lock: a reconcile pass holds it for its round trips, seconds with a slow API server,
        and a snapshot of the values is enough here."""
        if not self.policy.asks_to_move:
            return None  # such a policy's answer (stay) is given after the pod is checked
        flying = list(self.migrations.values())
        if any(m.namespace == req.namespace and m.pod == req.pod and m.source == node
               for m in flying):
            return ReallocationReply(decision="refused", reason="already migrating")
        if any(node in (m.source, m.target) for m in flying):
            return ReallocationReply(decision="refused",
                                     reason=f"a migration is in flight on node {node}")
        return None

    # -- starting ------------------------------------------------------------------------------
    def start(self, pod: dict[str, Any], reason: str = "converged", target: str | None = None,
              predicted_gain_s: float | None = None, cost_s: float | None = None,
              ) -> ReallocationReply:
        """Start migrating ``pod`` (to ``target``, or where Algorithm 4 says). A planned move
        gives its predicted gain and the cost it charged the job (``cost_s``, also the cost
        its slack is held against): recorded, and compared with the measured cost at the
        end."""
        with self.lock:
            m = reserve(self, pod, reason, target, predicted_gain_s, cost_s)
            if isinstance(m, ReallocationReply):
                return m
            try:
                step(self, m)
            except (KubeError, OSError) as exc:
                # Recorded and reserved: the move goes on from its record, in this replica's
                # next pass or, fenced, with the next leader; the agent is told it moves.
                self.metrics.reconcile_errors.inc()
                step_failed(m, exc)
            return ReallocationReply(decision="migrate", target=m.target, migrated=True)

    # -- the passes ----------------------------------------------------------------------------
    def reconcile(self) -> None:
        """One pass over the migrations in flight."""
        if not self.leader:
            return
        with self.lock:
            for m in list(self.migrations.values()):
                try:
                    step(self, m)
                except (KubeError, OSError) as exc:
                    self.metrics.reconcile_errors.inc()
                    if step_failed(m, exc):
                        break  # fenced: so is every later write of this pass
            for mid in list(self.measuring):
                try:
                    measure(self, mid)
                except (KubeError, OSError) as exc:
                    log.warning("migration %s: cost not measured yet: %s", mid, exc)
            self.metrics.migrations_in_flight.set(len(self.migrations))

    # -- restart -------------------------------------------------------------------------------
    def hand_over(self) -> None:
        """This replica stopped leading: let go of the migrations in flight (their records stay
        for the next leader: specon_manager.lead_lost); not ready until restored again."""
        with self.lock:
            self._ready = False
            hand_over(self.migrations, self.state)
            self.measuring.clear()
            self.evictions_sent.clear()
            self.stuck_reported.clear()
            self.metrics.migrations_in_flight.set(0)

    def restore(self) -> None:
        """Rebuild the migrations in flight from their records (after a restart or on becoming
        the leader). The records are read before the lock is taken: with a slow API server
        the lists take seconds, and an agent's request must not wait behind them."""
        objs = self.kube.list("/api/v1/pods", labelSelector=f"{L_MIGRATING}=true")
        for kind in OWNERS:
            try:
                objs += self.kube.list(owner_path(kind), labelSelector=f"{L_MIGRATING}=true")
            except KubeError as exc:
                # A custom resource this cluster lacks (404), or that the manager may not
                # list (403): no migration of its pods can be in flight that it started.
                if kind not in CUSTOM_KINDS or exc.status not in (403, 404):
                    raise
                log.warning("not restoring %s migrations: %s", kind, exc)
        with self.lock:
            found: dict[str, Migration] = {}
            for obj in objs:
                m = Migration.from_record(annotations_of(obj).get(A_MIGRATION, ""))
                if m is None or m.phase in ("done", "cancelled"):
                    continue
                old = found.get(m.id)
                # The record of the latest phase wins; in placing, a lifted reservation's record
                # (on the unpinned copy) is later than the pinned replacement's.
                if old is None or (PHASES.index(m.phase), not m.reserved) > (
                        PHASES.index(old.phase), not old.reserved):
                    found[m.id] = m
            self.migrations = found
            self.start_times = deque(sorted(m.started for m in found.values()))
            for m in found.values():
                if m.reserved:
                    self.state.reserve(Reservation(m.key, m.id, m.target, m.source,
                                                   pod=pod_key(m.namespace, m.pod)))
                if m.phase == "checkpointing":
                    self.state.request_checkpoint(m.source, CheckpointRequest(
                        namespace=m.namespace, pod=m.pod, uid=m.pod_uid, id=m.id))
                log.info("migration %s (%s/%s, %s -> %s) resumed from its record in phase %s",
                         m.id, m.namespace, m.pod, m.source, m.target, m.phase)
            self.metrics.migrations_in_flight.set(len(found))
            self._ready = True
