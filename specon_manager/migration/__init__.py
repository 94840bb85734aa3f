"""The migration controller (SpeCon Algorithm 4, made safe): reserve the target, have the job
checkpoint, wait for the verified checkpoint, evict, and see the replacement placed there.

Every step is recorded in a JSON annotation (``specon.io/migration``) on the object that holds
the job at that moment: the source pod until it is evicted, then the Job (Job-owned pods) or
the gated replacement pod (bare pods). A restarted manager lists those records and resumes or
rolls back each migration in flight. Phases::

    reserved -> checkpointing -> evicting -> placing -> done
                     \\-> cancelled (timeout, pod ended, eviction refused, target unfit): the
                         job stays; or cancelled because its user deleted it (its pod, its
                         owner, its replacement; in any phase): nothing is recreated.

Safety rules: only Running pods labelled ``specon.io/migratable=true``, either bare or owned by
an owner that never starts a second pod while the first one terminates and that the eviction
cannot fail (a Job with ``podReplacementPolicy: Failed``, also in a single-pod JobSet; a
single-replica StatefulSet, PyTorchJob or, on request, ReplicaSet: ``why_not_movable``);
nothing is evicted before the job's checkpoint answers this migration's request; a bare
pod's replacement is created (with a scheduling gate, so it cannot run, and pinned to the
target by node affinity, so it lands there even while the extender is away) before the pod is
evicted, and ungated only once the pod is gone; never a cordoned target; one migration
per node at a time; a global rate limit; a job is migrated at most once (and rebalanced at
most once). docs/manager.md walks through the phases and what a restart does in each.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from specon.core.categorize import Category
from specon.core.move_cost import format_cost, realised_gain, updated_cost
from specon.core.policy import lookup
from specon.core.qos_rules import migration_hold
from specon.core.scoring import WorkerView, decide_reallocation
from specon.wire import LABEL_MIGRATABLE, CheckpointRequest, ReallocationReply, ReallocationRequest
from specon_manager.kube import (
    CUSTOM_KINDS,
    OWNERS,
    Kube,
    KubeError,
    annotations_of,
    controller_ref,
    event_body,
    events_path,
    labels_of,
    meta,
    owner_path,
    pod_path,
)
from specon_manager.lead_lost import hand_over, step_failed
from specon_manager.metrics import ManagerMetrics
from specon_manager.migration.movable import (
    ENDING,
    PYTORCH_RESTARTS,
    ignores_disruption,
    is_ending,
    owner_of,
    parent_of,
    why_not_movable,
)
from specon_manager.migration.pod_spec import fits, pinned, unpinned, with_cpu_limit
from specon_manager.migration.record import (
    A_MIGRATED,
    A_MIGRATED_AT,
    A_MIGRATION,
    A_MOVE_COST,
    A_REBALANCED,
    GATE,
    L_MIGRATING,
    PHASES,
    REASONS,
    Migration,
)
from specon_manager.settings import ManagerSettings
from specon_manager.state import ANNOTATION_MIGRATION_ID, ClusterState, Reservation, pod_key

__all__ = [
    "A_MIGRATED", "A_MIGRATED_AT", "A_MIGRATION", "A_MOVE_COST", "A_REBALANCED", "ENDING",
    "MEASURE_WITHIN_S", "PHASES", "PYTORCH_RESTARTS", "REASONS", "Migration",
    "MigrationController", "fits", "ignores_disruption", "is_ending", "no_replacement_coming",
    "owner_of", "parent_of", "pinned", "started_at", "unpinned", "why_not_movable",
    "with_cpu_limit",
]

log = logging.getLogger(__name__)

#: How long after a completed migration's replacement was bound its container may take to
#: start (image pull included) and still give the move's measured cost; later, none is taken.
MEASURE_WITHIN_S = 3600.0


def started_at(pod: dict[str, Any]) -> float | None:
    """When the pod's containers were all running (the latest ``state.running.startedAt``, the
    node's clock), or None while one is not (or the pod is not Running)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return None
    times = []
    for cs in status.get("containerStatuses") or ():
        running = ((cs or {}).get("state") or {}).get("running") or {}
        since = running.get("startedAt") if isinstance(running, dict) else None
        if not since:
            return None
        try:
            times.append(datetime.fromisoformat(str(since).replace("Z", "+00:00")).timestamp())
        except ValueError:
            return None
    return max(times) if times else None




def _node_state(node: dict[str, Any] | None) -> str:
    """'gone', 'Ready', or the Ready condition's status and reason (e.g. 'NotReady
    (NodeStatusUnknown)')."""
    if node is None:
        return "gone"
    for cond in (node.get("status") or {}).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            if cond.get("status") == "True":
                return "Ready"
            return f"NotReady ({cond.get('reason') or cond.get('status')})"
    return "of unknown state"


def no_replacement_coming(kind: str, owner: dict[str, Any] | None) -> tuple[str, str] | None:
    """For a migration whose source is gone and whose owner has made no new pod yet: (result,
    why) when none will come for now, else None (wait for it). A deleted owner makes none. A
    suspended Job makes none until it runs again: Kueue suspends a Job when it preempts or
    deactivates its Workload, maybe for hours; waiting would hold the target's reservation and
    both nodes' migration slots all that time, and the job resumes from its checkpoint
    wherever its next pod goes."""
    if owner is None:
        return "failed", f"the {kind} was deleted"
    if kind == "Job" and (owner.get("spec") or {}).get("suspend") is True:
        return "suspended", ("its Job was suspended before its next pod was made (by Kueue, if "
                             "it preempted or deactivated the Job's Workload); the job resumes "
                             "from its last checkpoint when the Job runs again")
    return None


class MigrationController:
    """Runs migrations; thread-safe (agents' requests and the reconcile loop both call it)."""

    def __init__(self, kube: Kube, state: ClusterState, settings: ManagerSettings,
                 metrics: ManagerMetrics, clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.state = state
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.policy = lookup(settings.policy)
        self.leader = not settings.leader_election
        self._migrations: dict[str, Migration] = {}
        self._started: deque[float] = deque()
        self._lock = threading.RLock()
        self._ready = False
        self._stuck_reported: set[str] = set()  # migrations whose stuck source was reported
        #: Completed migrations whose replacement has not started yet, by id: (the migration,
        #: its replacement pod's name, when to give up); their cost is measured once it runs.
        #: Kept in memory only: a restart in between loses that one measurement.
        self._measuring: dict[str, tuple[Migration, str, float]] = {}
        #: Migrations whose eviction was sent in this run but whose answer was not seen (an
        #: error): a terminating source is then this manager's doing, not its user's.
        self._evictions_sent: set[str] = set()
        #: Test hook: called with a phase name after the record of that phase is written.
        self.after_phase: Callable[[str], None] | None = None

    # -- what the API asks -------------------------------------------------------------------
    def ready(self) -> bool:
        """Restored and leading: only the leader is ready, so a Service sends heartbeats and
        extender calls to it alone (docs/manager.md)."""
        return self._ready and self.leader

    def in_flight(self) -> list[Migration]:
        with self._lock:
            return list(self._migrations.values())

    def busy_nodes(self) -> set[str]:
        with self._lock:
            return {n for m in self._migrations.values() for n in (m.source, m.target)}

    def cordoned(self) -> set[str]:
        """Nodes marked unschedulable: never a target (asked at each decision, so a cordon is
        seen at once; the field selector keeps the answer small)."""
        return {meta(n)["name"] for n in self.kube.list(
            "/api/v1/nodes", fieldSelector="spec.unschedulable=true")}

    def fitting_nodes(self, pod: dict[str, Any]) -> set[str] | None:
        """The nodes the pod's new copy could be placed on by its ``nodeSelector`` and required
        node affinity (:func:`fits`), or None when it names neither (any node). A target
        outside them would be reserved in vain: the copy (made from the same spec, by the
        manager or the owner) waits there until the placement timeout lifts the reservation.
        A Kueue-admitted Job's pods carry their ResourceFlavor's node labels this way."""
        spec = pod.get("spec") or {}
        selector = spec.get("nodeSelector") or {}
        affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution")
        if not selector and not affinity:
            return None
        # The node selector narrows the list on the server; fits() judges the rest.
        params = {"labelSelector": ",".join(f"{k}={v}" for k, v in sorted(
            selector.items()))} if selector else {}
        return {meta(n)["name"] for n in self.kube.list("/api/v1/nodes", **params)
                if fits(spec, n)}

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
        flying = list(self._migrations.values())
        if any(m.namespace == req.namespace and m.pod == req.pod and m.source == node
               for m in flying):
            return ReallocationReply(decision="refused", reason="already migrating")
        if any(node in (m.source, m.target) for m in flying):
            return ReallocationReply(decision="refused",
                                     reason=f"a migration is in flight on node {node}")
        return None

    # -- starting ------------------------------------------------------------------------------
    def qos_hold(self, pod: dict[str, Any], cost_s: float | None = None) -> str | None:
        """Why the job in ``pod`` must not move now (at risk, or less slack than a migration
        costs: ``cost_s``, or ``migration_cost_s``), from its source node's latest fresh
        report; None when it may."""
        md = meta(pod)
        source = (pod.get("spec") or {}).get("nodeName") or ""
        rep = self.state.job_on(source, md["namespace"], md["name"], md.get("uid", ""))
        if rep is None:
            return None
        return migration_hold(rep.qos, rep.slack_s, self.settings.migration_cost_s
                              if cost_s is None else cost_s)

    def _job_of(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        return owner_of(self.kube, pod)

    def _rate_ok(self, now: float) -> bool:
        window = self.settings.migration_window_s
        while self._started and now - self._started[0] > window:
            self._started.popleft()
        return len(self._started) < self.settings.max_migrations_per_window

    def _mark(self, pod: dict[str, Any], job: dict[str, Any] | None, values: dict[str, str]) -> (
        None
    ):
        if job is not None:
            self.kube.patch(owner_path(str(job["kind"]), meta(job)["namespace"],
                                       meta(job)["name"]),
                            {"metadata": {"uid": meta(job)["uid"], "annotations": values}})
        else:
            self.kube.patch(pod_path(meta(pod)["namespace"], meta(pod)["name"]),
                            {"metadata": {"uid": meta(pod)["uid"], "annotations": values}})

    def start(self, pod: dict[str, Any], reason: str = "converged", target: str | None = None,
              predicted_gain_s: float | None = None, cost_s: float | None = None,
              ) -> ReallocationReply:
        """Start migrating ``pod`` (to ``target``, or where Algorithm 4 says). A planned move
        gives its predicted gain and the cost it charged the job (``cost_s``, also the cost
        its slack is held against): recorded, and compared with the measured cost at the
        end."""
        with self._lock:
            md = meta(pod)
            ns, name = md["namespace"], md["name"]
            job = self._job_of(pod)
            why = why_not_movable(pod, job, reason, self.settings.migrate_replicaset_pods,
                                  parent_of(self.kube, job))
            if is_ending(why):
                return ReallocationReply(decision="refused", reason=str(why))
            if why is not None and "already" in why:
                return ReallocationReply(decision="stay", reason=why, migrated=True)
            if why is not None:
                if target is not None:
                    return ReallocationReply(decision="refused", reason=why)
                # Never movable (not opted in, an owner the manager cannot rely on): the
                # simulator's rule too, judged best where it is and marked, so that its agent
                # stops asking; nothing is written to the pod.
                source = str((pod.get("spec") or {}).get("nodeName") or "")
                d = decide_reallocation((), self.state.weights, source, movable=False)
                log.info("%s/%s stays where it is: %s", ns, name, why)
                assert d.decision == "stay"
                if labels_of(pod).get(LABEL_MIGRATABLE) == "true":
                    # It asked to be movable and its owner's shape says no: tell its user.
                    self._event(pod, "MigrationRefused", f"{name} cannot be migrated: {why}",
                                warning=True)
                return ReallocationReply(decision="stay", target=source, migrated=d.migrated,
                                         reason=why)
            if any(m.namespace == ns and m.pod == name for m in self._migrations.values()):
                return ReallocationReply(decision="refused", reason="already migrating")
            hold = self.qos_hold(pod, cost_s)
            if hold is not None:
                self.metrics.migrations_held.labels(reason).inc()
                log.info("not moving %s/%s (%s): %s", ns, name, reason, hold)
                return ReallocationReply(decision="stay", reason=hold)
            source = pod["spec"]["nodeName"]
            busy = self.busy_nodes()
            if source in busy:
                return ReallocationReply(decision="refused",
                                         reason=f"a migration is in flight on node {source}")
            now = self.clock()
            cordoned = self.cordoned()
            allowed = self.fitting_nodes(pod)
            if target is None:
                found = self.state.find_job(ns, name)
                category = found[1].category if found else Category.CONVERGED
                unfit = set(self.state.fresh_nodes()) - allowed if allowed is not None else set()
                closed = (busy | cordoned | unfit) - {source}
                views = [v if v.name not in closed else replace(v, available=False)
                         for v in self.state.views(self.state.fresh_nodes())]
                if source not in {v.name for v in views}:
                    views.append(WorkerView(source, available=False))
                d = decide_reallocation(views, self.state.weights, source, category)
                if d.decision == "stay":
                    self._mark(pod, job, {A_MIGRATED: "stayed",
                                          A_MIGRATED_AT: f"{now:.3f}"})
                    self.metrics.migrations.labels("stayed").inc()
                    self._event(pod, "MigrationNotNeeded",
                                f"{name} is best where it is (scores {dict(d.scores)})")
                    return ReallocationReply(decision="stay", target=source, migrated=True,
                                             reason=d.reason)
                if d.target is None:
                    return ReallocationReply(decision="refused", reason=f"{d.reason} (nodes "
                                             "unknown or busy)")
                target = d.target
            elif target in busy:
                return ReallocationReply(decision="refused",
                                         reason=f"a migration is in flight on node {target}")
            elif target in cordoned:
                return ReallocationReply(decision="refused",
                                         reason=f"node {target} is cordoned")
            elif allowed is not None and target not in allowed:
                return ReallocationReply(decision="refused", reason=(
                    f"the pod cannot run on node {target} (its nodeSelector or required node "
                    "affinity)"))
            if not self._rate_ok(now):
                return ReallocationReply(decision="refused", reason="global migration rate limit")
            ref = controller_ref(pod)
            m = Migration(
                id=uuid.uuid4().hex[:12], namespace=ns, pod=name, pod_uid=md["uid"],
                source=source, target=target,
                kind=str(job["kind"]).lower() if job is not None else "pod",
                owner=ref["name"] if job is not None and ref else "",
                owner_uid=str(ref.get("uid", "")) if job is not None and ref else "",
                reason=reason, phase="reserved", started=now,
                deadline=now + self.settings.checkpoint_timeout_s,
                predicted_gain_s=predicted_gain_s, charged_cost_s=cost_s)
            self._write_source(m)
            self._started.append(now)
            self._migrations[m.id] = m
            self.state.reserve(Reservation(m.key, m.id, target, source, pod=pod_key(ns, name)))
            self.metrics.migrations_started.labels(reason).inc()
            self.metrics.migrations_in_flight.set(len(self._migrations))
            plan = "" if predicted_gain_s is None or cost_s is None else (
                f"; predicted gain {predicted_gain_s:.0f} s net of a charged move cost of "
                f"{cost_s:.0f} s")
            self._event(pod, "MigrationStarted",
                        f"migration {m.id} ({reason}): {source} -> {target}; target reserved"
                        + plan)
            log.info("migration %s: %s/%s %s -> %s (%s)", m.id, ns, name, source, target, reason)
            self._hook("reserved")
            try:
                self._step(m)
            except (KubeError, OSError) as exc:
                # Recorded and reserved: the move goes on from its record, in this replica's
                # next pass or, fenced, with the next leader; the agent is told it moves.
                self.metrics.reconcile_errors.inc()
                step_failed(m, exc)
            return ReallocationReply(decision="migrate", target=target, migrated=True)

    # -- records ---------------------------------------------------------------------------------
    def _write_source(self, m: Migration) -> None:
        """Record ``m`` on its source pod (uid precondition: never on a namesake)."""
        self.kube.patch(pod_path(m.namespace, m.pod), {"metadata": {
            "uid": m.pod_uid, "labels": {L_MIGRATING: "true"},
            "annotations": {A_MIGRATION: m.record()}}})

    def _hook(self, phase: str) -> None:
        if self.after_phase is not None:
            self.after_phase(phase)

    def _event(self, obj: dict[str, Any], reason: str, message: str,
               kind: str = "Pod", warning: bool = False) -> None:
        md = meta(obj)
        body = event_body(obj, reason, message, action="Migrate", kind=kind, warning=warning)
        try:
            self.kube.create(events_path(md["namespace"]), body)
        except (KubeError, OSError) as exc:  # an event is never worth failing a migration
            log.warning("event %s on %s/%s not recorded: %s", reason, md["namespace"],
                        md["name"], exc)

    def _pod_ref(self, m: Migration) -> dict[str, Any]:
        return {"apiVersion": "v1",
                "metadata": {"name": m.pod, "namespace": m.namespace, "uid": m.pod_uid}}

    # -- the state machine -------------------------------------------------------------------------
    def reconcile(self) -> None:
        """One pass over the migrations in flight."""
        if not self.leader:
            return
        with self._lock:
            for m in list(self._migrations.values()):
                try:
                    self._step(m)
                except (KubeError, OSError) as exc:
                    self.metrics.reconcile_errors.inc()
                    if step_failed(m, exc):
                        break  # fenced: so is every later write of this pass
            for mid in list(self._measuring):
                try:
                    self._measure(mid)
                except (KubeError, OSError) as exc:
                    log.warning("migration %s: cost not measured yet: %s", mid, exc)
            self.metrics.migrations_in_flight.set(len(self._migrations))

    def _set(self, m: Migration, **changes: Any) -> Migration:
        m = replace(m, **changes)
        self._migrations[m.id] = m
        return m

    def _step(self, m: Migration) -> None:
        now = self.clock()
        if m.phase == "reserved":
            self.state.request_checkpoint(m.source, CheckpointRequest(
                namespace=m.namespace, pod=m.pod, uid=m.pod_uid, id=m.id))
            m = self._set(m, phase="checkpointing", requested=now,
                          deadline=now + self.settings.checkpoint_timeout_s)
            self._write_source(m)
            self._event(self._pod_ref(m), "CheckpointRequested",
                        f"migration {m.id}: asked the job to checkpoint (request id {m.id})")
            self._hook("checkpointing")
        if m.phase == "checkpointing":
            pod = self.kube.get(pod_path(m.namespace, m.pod))
            # A terminating pod still reads Running, and its job's shutdown save answers the
            # pending request: a user's delete must end the move here (issue 32).
            deleted = self._why_deleted(m, pod)
            if deleted is not None:
                self._cancel_deleted(m, deleted)
                return
            assert pod is not None
            if (pod.get("status") or {}).get("phase") != "Running":
                self._cancel(m, "the pod ended before its checkpoint was verified")
                return
            # Only the source node's agent can read the job's saved.json; a report from any
            # other node, or about another pod of the same name, proves nothing.
            found = self.state.job_on(m.source, m.namespace, m.pod, m.pod_uid)
            ck = found.checkpoint if found else None
            # saved.json's `request` is the last request the job honoured; every later save
            # keeps it, so a match means a verified checkpoint at or after this request.
            if ck is not None and ck.request == m.id:
                self.metrics.checkpoint_wait_seconds.observe(max(0.0, now - m.started))
                self._event(pod, "CheckpointVerified",
                            f"migration {m.id}: checkpoint {ck.name} (step {ck.step}, sha256 "
                            f"{ck.sha256[:12]}) verified")
                m = self._set(m, phase="evicting",
                              deadline=now + self.settings.placement_timeout_s)
                self._write_source(m)
                self._hook("evicting")
            elif now > m.deadline:
                self._cancel(m, f"no verified checkpoint within "
                                f"{self.settings.checkpoint_timeout_s:.0f} s")
                return
            else:
                return
        if m.phase == "evicting":
            self._evict(m, now)
            return
        if m.phase == "placing":
            self._place(m, now)

    def _evict(self, m: Migration, now: float) -> None:
        pod = self.kube.get(pod_path(m.namespace, m.pod))
        going = pod is None or meta(pod).get("uid") != m.pod_uid or bool(
            meta(pod).get("deletionTimestamp"))
        # A source going after this run sent its eviction (the answer lost) is its doing.
        ours = going and m.id in self._evictions_sent
        deleted = self._why_deleted(m, pod, pod_too=not ours)
        if deleted is not None:
            self._cancel_deleted(m, deleted)
            return
        if not ours:
            # Nothing evicted yet: an unfit target or the phase's deadline ends the move here,
            # with what this phase recorded undone (issue 32).
            assert pod is not None
            why = self._target_unfit(m, pod) or (
                f"not evicted within {self.settings.placement_timeout_s:.0f} s"
                if now > m.deadline else None)
            if why is not None:
                self._undo_evicting(m)
                self._cancel(m, why)
                return
        placing = replace(m, phase="placing", deadline=now + self.settings.placement_timeout_s)
        marker = A_REBALANCED if m.reason == "rebalance" else A_MIGRATED
        # The record that outlives the pod comes first.
        if m.owned:
            self.kube.patch(m.owner_path(), {"metadata": {
                "uid": m.owner_uid, "labels": {L_MIGRATING: "true"},
                "annotations": {A_MIGRATION: placing.record(), marker: m.id,
                                A_MIGRATED_AT: f"{now:.3f}"}}})
        else:
            placing = replace(placing, replacement=self._replacement_name(m))
            self._create_replacement(placing, marker, now)
        self._hook("evicting-recorded")
        self._evictions_sent.add(m.id)
        evicted = self._request_eviction(m, placing)
        self._evictions_sent.discard(m.id)
        if not evicted:
            return
        self._set(placing)
        self._hook("placing")
        self._place(placing, now)

    def _request_eviction(self, m: Migration, placing: Migration) -> bool:
        """Evict the source pod (its record in phase placing is already written); False when
        the eviction is refused, and the migration then rolled back."""
        try:
            self.kube.create(pod_path(m.namespace, m.pod) + "/eviction", {
                "apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": m.pod, "namespace": m.namespace},
                "deleteOptions": {"preconditions": {"uid": m.pod_uid}}})
        except KubeError as exc:
            # 404: gone already; 409: the UID precondition failed, so the pod by that UID is
            # gone too (a namesake took the name).
            if exc.status == 429:  # a PodDisruptionBudget says no
                self._undo_record(placing)
                self._cancel(m, f"eviction refused: {exc}")
                return False
            if exc.status not in (404, 409):
                raise
        self.state.withdraw_checkpoint(m.source, m.namespace, m.pod)
        self._event(self._pod_ref(m), "MigrationEvicted",
                    f"migration {m.id}: evicted after a verified checkpoint; the replacement "
                    f"goes to {m.target}")
        return True

    def _replacement_name(self, m: Migration) -> str:
        return f"{m.pod[:240]}-m{m.id[:6]}"

    def _create_replacement(self, m: Migration, marker: str, now: float) -> None:
        src = self.kube.get(pod_path(m.namespace, m.pod))
        if src is None or meta(src).get("uid") != m.pod_uid:
            if self.kube.get(pod_path(m.namespace, m.replacement)) is not None:
                return  # made before a restart
            raise KubeError(410, "Gone", "the source pod vanished before its replacement was "
                                         "created")
        md = meta(src)
        ann = {k: v for k, v in (md.get("annotations") or {}).items()
               if not k.startswith("specon.io/") or k == A_MOVE_COST}
        ann.update({A_MIGRATION: m.record(), ANNOTATION_MIGRATION_ID: m.id, marker: m.id,
                    A_MIGRATED_AT: f"{now:.3f}"})
        spec = pinned(src["spec"], m.target)
        spec.pop("nodeName", None)
        spec["schedulingGates"] = [{"name": GATE}]
        # The source's spec holds the limit its agent set (resize actuator): the copy gets the
        # owner's, as the source's agent last reported it (the fault campaign found a moved
        # job keeping the agent's limit for good).
        rep = self.state.job_on(m.source, m.namespace, m.pod, m.pod_uid)
        if rep is not None and rep.owner_limit_cores is not None:
            with_cpu_limit(spec, rep.container, rep.owner_limit_cores)
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": m.replacement, "namespace": m.namespace,
            "labels": {**(md.get("labels") or {}), L_MIGRATING: "true"}, "annotations": ann},
            "spec": spec}
        try:
            self.kube.create(pod_path(m.namespace), body)
        except KubeError as exc:
            if exc.status != 409:
                raise

    def _lift_bare(self, m: Migration, rep: dict[str, Any], now: float) -> None:
        """The pinned replacement was not placed in time: make an unpinned copy, gated. The
        pinned one is deleted (if still unbound) before the copy is ungated, in _place."""
        lifted = replace(m, replacement=self._replacement_name(m) + "-u", reserved=False,
                         deadline=now + self.settings.placement_timeout_s)
        md = meta(rep)
        ann = dict(md.get("annotations") or {})
        ann[A_MIGRATION] = lifted.record()
        spec = unpinned(rep["spec"], m.target)
        spec.pop("nodeName", None)
        spec["schedulingGates"] = [{"name": GATE}]
        try:
            self.kube.create(pod_path(m.namespace), {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": lifted.replacement, "namespace": m.namespace,
                             "labels": dict(md.get("labels") or {}), "annotations": ann},
                "spec": spec})
        except KubeError as exc:
            if exc.status != 409:
                raise
        self.state.release(m.key)
        self._set(lifted)
        self._hook("lifted")
        self._event(self._pod_ref(m), "MigrationReservationLifted",
                    f"migration {m.id}: not placed on {m.target} within "
                    f"{self.settings.placement_timeout_s:.0f} s; placing it anywhere",
                    warning=True)

    def _undo_record(self, m: Migration) -> None:
        if m.owned:
            self.kube.patch(m.owner_path(), {"metadata": {
                "labels": {L_MIGRATING: None},
                "annotations": {A_MIGRATION: None, A_MIGRATED: None, A_REBALANCED: None}}})
        else:
            # Still gated: it never ran.
            self.kube.delete(pod_path(m.namespace, m.replacement))

    def _place(self, m: Migration, now: float) -> None:
        if m.owned:
            # Its owner deleted: whatever pod it made goes with it; nothing is recreated.
            deleted = self._why_deleted(m, None, pod_too=False)
            if deleted is not None:
                self._cancel_deleted(m, deleted)
                return
        src = self.kube.get(pod_path(m.namespace, m.pod))
        if src is not None and meta(src).get("uid") == m.pod_uid:
            if not meta(src).get("deletionTimestamp"):
                # Recorded as placing, but the eviction was never sent (the manager stopped in
                # between): send it now, to a target still fit. The checkpoint was verified
                # before the record.
                unfit = self._target_unfit(m, src) if m.reserved else None
                if unfit is not None:
                    self._undo_evicting(m)
                    self._cancel(m, unfit)
                    return
                self._request_eviction(m, m)
            else:
                self._source_stuck(m, src, now)
            return
        self.state.source_gone(m.key)
        if m.kind == "pod":
            self._place_bare(m, now)
            return
        selector = {"labelSelector": f"batch.kubernetes.io/controller-uid={m.owner_uid}"} if (
            m.kind == "job") else {}
        candidates = [p for p in self.kube.list(pod_path(m.namespace), **selector)
                      if (controller_ref(p) or {}).get("uid") == m.owner_uid
                      and meta(p).get("uid") != m.pod_uid and not meta(p).get("deletionTimestamp")]
        if not candidates:
            ended = no_replacement_coming(m.owner_kind, self.kube.get(m.owner_path()))
            if ended is not None:
                self._finish(m, None, ended[1], result=ended[0])
                return
        bound = [p for p in candidates if (p.get("spec") or {}).get("nodeName")]
        if bound:
            self._finish(m, bound[0], "")
            return
        if m.reserved and now > m.deadline:
            # The target cannot take it: let the scheduler place it anywhere (never lost).
            lifted = self._set(m, reserved=False, deadline=now + self.settings.placement_timeout_s)
            self.kube.patch(m.owner_path(), {"metadata": {
                "uid": m.owner_uid, "annotations": {A_MIGRATION: lifted.record()}}})
            self.state.release(m.key)
            self._hook("lifted")
            self._event(self._pod_ref(m), "MigrationReservationLifted",
                        f"migration {m.id}: not placed on {m.target} within "
                        f"{self.settings.placement_timeout_s:.0f} s; placing it anywhere",
                        warning=True)
        elif not m.reserved and now > m.deadline:
            self._finish(m, None, self._unplaced(), result="failed")

    def _unplaced(self) -> str:
        return (f"the new pod was not placed within {self.settings.placement_timeout_s:.0f} s "
                "of the reservation's lifting either; it stays pending and the scheduler "
                "places it wherever a node fits (the migration ends here)")

    def _source_stuck(self, m: Migration, src: dict[str, Any], now: float) -> None:
        """The evicted source is still terminating: the replacement waits for it, so that the
        job never runs twice. Past its grace period plus ``source_stuck_after_s`` (its node
        dead or cut off, a finalizer), say so once, with the way out, instead of waiting in
        silence: Kubernetes removes the pod when its node is deleted or tainted
        ``node.kubernetes.io/out-of-service``, and the job then resumes on the target."""
        if m.id in self._stuck_reported:
            return
        try:
            ends = datetime.fromisoformat(str(meta(src)["deletionTimestamp"])).timestamp()
        except (KeyError, ValueError):
            return
        if now < ends + self.settings.source_stuck_after_s:
            return
        self._stuck_reported.add(m.id)
        node = (src.get("spec") or {}).get("nodeName") or m.source
        state = _node_state(self.kube.get(f"/api/v1/nodes/{node}"))
        self.metrics.migrations_stuck.inc()
        since = datetime.fromtimestamp(ends, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._event(self._pod_ref(m), "MigrationSourceStuck",
                    f"migration {m.id}: the evicted pod is still terminating (grace period "
                    f"ended {since}; node {node} is {state}); its replacement waits for it so "
                    f"that the job never runs twice. If the node is dead, delete its Node "
                    f"object or taint it node.kubernetes.io/out-of-service=nodeshutdown:"
                    f"NoExecute; Kubernetes then removes the pod and the job resumes on "
                    f"{m.target} from its verified checkpoint. A finalizer on the pod holds "
                    f"it the same way.", warning=True)
        log.warning("migration %s: source %s/%s still terminating on %s (%s)", m.id,
                    m.namespace, m.pod, node, state)

    def _place_bare(self, m: Migration, now: float) -> None:
        """A bare pod's replacement, once the source is gone: ungate it and see it bound."""
        pinned_name = self._replacement_name(m)
        if m.replacement != pinned_name:
            # Lifted: the pinned replacement goes before its unpinned copy may run.
            old = self.kube.get(pod_path(m.namespace, pinned_name))
            if old is not None:
                if (old.get("spec") or {}).get("nodeName"):
                    # It was placed after all: keep it; the copy is still gated (never ran).
                    self.kube.delete(pod_path(m.namespace, m.replacement))
                    self._finish(self._set(m, replacement=pinned_name), old, "")
                    return
                # The resourceVersion precondition fails (409) if it was bound meanwhile.
                self.kube.delete(pod_path(m.namespace, pinned_name), {"preconditions": {
                    "uid": meta(old).get("uid"),
                    "resourceVersion": meta(old).get("resourceVersion")}})
                return
        rep = self.kube.get(pod_path(m.namespace, m.replacement))
        if rep is None or meta(rep).get("deletionTimestamp"):
            # Its user deleted the job where it now is: it is not made again.
            self._cancel_deleted(m, f"its replacement pod {m.replacement} was deleted")
            return
        gated = bool((rep.get("spec") or {}).get("schedulingGates"))
        if gated:
            self.kube.patch(pod_path(m.namespace, m.replacement),
                            {"spec": {"schedulingGates": None}})
            self._hook("ungated")
        if (rep.get("spec") or {}).get("nodeName"):
            self._finish(m, rep, "")
        elif m.reserved and now > m.deadline:
            self._lift_bare(m, rep, now)
        elif not m.reserved and not gated and now > m.deadline:
            self._finish(m, None, self._unplaced(), result="failed")

    def _finish(self, m: Migration, placed: dict[str, Any] | None, problem: str,
                result: str = "") -> None:
        """End ``m``: its replacement ``placed`` (None: none, because of ``problem``).
        ``result`` (the metric's label) is worked out unless given."""
        self.state.release(m.key)
        self._migrations.pop(m.id, None)
        self._stuck_reported.discard(m.id)
        node = (placed or {}).get("spec", {}).get("nodeName")
        done = replace(m, phase="done")
        holder = m.owner_path() if m.owned else pod_path(m.namespace, m.replacement)
        try:
            self.kube.patch(holder, {"metadata": {"labels": {L_MIGRATING: None},
                                                  "annotations": {A_MIGRATION: done.record()}}})
        except KubeError as exc:
            if exc.status != 404:
                raise
        result = result or (
            "completed" if node == m.target else "failed" if placed is None else "elsewhere")
        self.metrics.migrations.labels(result).inc()
        if result == "completed":
            self.metrics.migration_seconds.observe(max(0.0, self.clock() - m.started))
        if placed is not None:
            # The job's stop ends when its replacement runs: measured by the next passes.
            self._measuring[m.id] = (m, meta(placed)["name"], self.clock() + MEASURE_WITHIN_S)
        target = placed if placed is not None else self._pod_ref(m)
        reason = ("MigrationCompleted" if placed else
                  "MigrationInterrupted" if result == "suspended" else "MigrationFailed")
        plan = "" if m.predicted_gain_s is None or m.charged_cost_s is None else (
            f" (predicted gain {m.predicted_gain_s:.0f} s, charged cost "
            f"{m.charged_cost_s:.0f} s; the measured cost follows in MigrationCostMeasured)")
        self._event(target, reason,
                    f"migration {m.id}: replacement {meta(target)['name']} placed on {node}"
                    + plan if placed else f"migration {m.id}: {problem}",
                    warning=reason == "MigrationFailed")
        log.info("migration %s %s (%s)", m.id, result, node or problem)
        self.metrics.migrations_in_flight.set(len(self._migrations))

    def _measure(self, mid: str) -> None:
        """The cost of completed migration ``mid``, once its replacement runs: the seconds from
        the checkpoint request to the replacement's containers started (node clock, bounded
        by the manager's: never before the request, never after now). Written on the job's
        object as its running mean (``specon.io/move-cost-s``, what the planner charges its
        next move), observed in ``specon_move_cost_seconds`` and, for a planned move, set
        against its prediction (``specon_move_gain_seconds``, event MigrationCostMeasured)."""
        m, name, until = self._measuring[mid]
        now = self.clock()
        pod = self.kube.get(pod_path(m.namespace, name))
        running = None if pod is None else started_at(pod)
        if pod is None or running is None:
            ended = pod is None or bool(meta(pod).get("deletionTimestamp")) or (
                pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if ended or now > until:
                del self._measuring[mid]
                log.info("migration %s: no cost measured (its replacement %s)", mid,
                         "ended before it ran" if ended else "has not started in "
                         f"{MEASURE_WITHIN_S:.0f} s")
            return
        del self._measuring[mid]
        begin = m.requested or m.started
        cost = min(max(running, begin), now) - begin
        holder = m.owner_path() if m.owned else pod_path(m.namespace, name)
        uid = m.owner_uid if m.owned else meta(pod).get("uid")
        obj = self.kube.get(holder)
        if obj is not None and meta(obj).get("uid") == uid:
            mean = updated_cost(annotations_of(obj).get(A_MOVE_COST), cost)
            try:
                self.kube.patch(holder, {"metadata": {"uid": uid, "annotations": {
                    A_MOVE_COST: format_cost(mean)}}})
            except KubeError as exc:
                if exc.status not in (404, 409):
                    raise
        self.metrics.move_cost_seconds.observe(cost)
        text = (f"migration {m.id}: the job was stopped {cost:.0f} s (from the checkpoint "
                f"request to its replacement {name} running)")
        if m.predicted_gain_s is not None and m.charged_cost_s is not None:
            real = realised_gain(m.predicted_gain_s, m.charged_cost_s, cost)
            for kind, gain in (("predicted", m.predicted_gain_s), ("realised", real)):
                self.metrics.move_gain_seconds.labels(kind).observe(gain)
                self.metrics.move_gain_sum.labels(kind).inc(gain)
            text += (f"; charged {m.charged_cost_s:.0f} s, predicted gain "
                     f"{m.predicted_gain_s:.0f} s, realised gain {real:.0f} s (the prediction "
                     "with the measured cost)")
        self._event(pod, "MigrationCostMeasured", text)
        log.info("migration %s: move cost %.1f s", m.id, cost)

    def _cancel(self, m: Migration, why: str) -> None:
        self.state.withdraw_checkpoint(m.source, m.namespace, m.pod)
        self.state.release(m.key)
        self._migrations.pop(m.id, None)
        marker = A_REBALANCED if m.reason == "rebalance" else A_MIGRATED
        try:
            body: dict[str, Any] = {"labels": {L_MIGRATING: None},
                                    "annotations": {A_MIGRATION: None}}
            holder = self.kube.get(m.owner_path()) if m.owned else None
            self.kube.patch(pod_path(m.namespace, m.pod),
                            {"metadata": {"uid": m.pod_uid, **body}})
            # At most one attempt per job: it stays where it is from now on.
            pod = {"metadata": {"name": m.pod, "namespace": m.namespace, "uid": m.pod_uid}}
            self._mark(pod, holder, {marker: "cancelled"})
        except KubeError as exc:
            if exc.status not in (404, 409, 422):
                raise
        self.metrics.migrations.labels("cancelled").inc()
        self._event(self._pod_ref(m), "MigrationCancelled",
                    f"migration {m.id}: {why}; the job keeps running on {m.source}",
                    warning=True)
        log.info("migration %s cancelled: %s", m.id, why)
        self.metrics.migrations_in_flight.set(len(self._migrations))

    # -- a user's delete, an unfit target (issue 32) ---------------------------------------------
    def _why_deleted(self, m: Migration, pod: dict[str, Any] | None,
                     pod_too: bool = True) -> str | None:
        """Why ``m``'s job was deleted by its user (its owner deleted, being deleted or
        replaced by a namesake; with ``pod_too``, its source pod ``pod``, as just read, gone
        or terminating: asked only before the eviction), or None."""
        if m.owned:
            owner = self.kube.get(m.owner_path())
            if owner is None or meta(owner).get("uid") != m.owner_uid:
                return f"its {m.owner_kind} {m.owner} was deleted"
            if meta(owner).get("deletionTimestamp"):
                return f"its {m.owner_kind} {m.owner} is being deleted"
        if not pod_too:
            return None
        if pod is None or meta(pod).get("uid") != m.pod_uid:
            return f"the pod {m.pod} was deleted"
        if meta(pod).get("deletionTimestamp"):
            return f"the pod {m.pod} is being deleted"
        return None

    def _target_unfit(self, m: Migration, pod: dict[str, Any]) -> str | None:
        """Why the reserved target can no longer take the job (gone, NotReady, cordoned, or
        no longer allowed by the pod's nodeSelector and required node affinity: :func:`fits`,
        as at the start), or None. Asked before the eviction: a move to an unfit target would
        leave the job down until the placement timeout."""
        node = self.kube.get(f"/api/v1/nodes/{m.target}")
        if node is None:
            return f"the target {m.target} is gone"
        if (node.get("spec") or {}).get("unschedulable"):
            return f"the target {m.target} was cordoned"
        state = _node_state(node)
        if state.startswith("NotReady"):
            return f"the target {m.target} is {state}"
        if not fits(pod.get("spec") or {}, node):
            return (f"the pod no longer fits the target {m.target} (its nodeSelector or "
                    "required node affinity)")
        return None

    def _undo_evicting(self, m: Migration) -> None:
        """Undo what the evicting phase may have recorded before its eviction (the owner's
        record, or a bare pod's gated replacement, which never ran)."""
        try:
            self._undo_record(replace(m, replacement=m.replacement or self._replacement_name(m)))
        except KubeError as exc:
            if exc.status not in (404, 409, 422):
                raise

    def _cancel_deleted(self, m: Migration, why: str) -> None:
        """End ``m`` as cancelled because its user deleted the job mid-move (its pod, its owner
        or its replacement): nothing is recreated (a bare pod's replacement that never ran is
        deleted), whatever survives keeps the record as cancelled and no longer reads as in
        flight (a restart does not resume it), and the reservation and both nodes are free."""
        ended = {"labels": {L_MIGRATING: None},
                 "annotations": {A_MIGRATION: replace(m, phase="cancelled").record()}}
        survivors: list[tuple[dict[str, Any], str]] = []

        def keep(path: str, uid: str, kind: str) -> None:
            try:
                survivors.append((self.kube.patch(path, {"metadata": {"uid": uid, **ended}}),
                                  kind))
            except KubeError as exc:
                if exc.status not in (404, 409, 422):
                    raise

        keep(pod_path(m.namespace, m.pod), m.pod_uid, "Pod")
        if m.owned:
            keep(m.owner_path(), m.owner_uid, m.owner_kind)
        else:
            pinned_name = self._replacement_name(m)
            for name in (pinned_name, pinned_name + "-u"):
                rep = self.kube.get(pod_path(m.namespace, name))
                if rep is None:
                    continue
                md = meta(rep)
                if md.get("deletionTimestamp") or (rep.get("spec") or {}).get("nodeName"):
                    keep(pod_path(m.namespace, name), str(md.get("uid")), "Pod")
                else:
                    # Gated or not yet placed: it never ran, and goes with the job (409 if it
                    # was bound meanwhile: the next pass looks again).
                    self.kube.delete(pod_path(m.namespace, name), {"preconditions": {
                        "uid": md.get("uid"), "resourceVersion": md.get("resourceVersion")}})
        self.state.withdraw_checkpoint(m.source, m.namespace, m.pod)
        self.state.release(m.key)
        self._migrations.pop(m.id, None)
        self._stuck_reported.discard(m.id)
        self._evictions_sent.discard(m.id)
        self.metrics.migrations.labels("cancelled").inc()
        if survivors:
            obj, kind = survivors[0]
            self._event(obj, "MigrationCancelled",
                        f"migration {m.id}: {why}; nothing is recreated", kind=kind)
        log.info("migration %s cancelled: %s; nothing is recreated", m.id, why)
        self.metrics.migrations_in_flight.set(len(self._migrations))

    # -- restart -------------------------------------------------------------------------------
    def hand_over(self) -> None:
        """This replica stopped leading: let go of the migrations in flight (their records stay
        for the next leader: specon_manager.lead_lost); not ready until restored again."""
        with self._lock:
            self._ready = False
            hand_over(self._migrations, self.state)
            self._measuring.clear()
            self._evictions_sent.clear()
            self._stuck_reported.clear()
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
        with self._lock:
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
            self._migrations = found
            self._started = deque(sorted(m.started for m in found.values()))
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
