"""What every phase handler of a migration works with: the API, the cluster state, the
settings, the migrations in flight (one lock over them all), and the writes the phases share
(the source's record, events, the test hook)."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from specon.core.policy import lookup
from specon.wire import LABEL_MIGRATABLE
from specon_manager.kube import (
    Kube,
    KubeError,
    event_body,
    events_path,
    meta,
    owner_path,
    pod_path,
)
from specon_manager.metrics import ManagerMetrics
from specon_manager.migration.record import A_MIGRATION, L_MIGRATING, Migration
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState
from specon_manager.watch_cache import WatchCache

#: One logger for every part of the migration (its name predates the split into modules).
log = logging.getLogger("specon_manager.migration")


class PhaseContext:
    """The state the phases share; :class:`MigrationController` is one, with the public API."""

    def __init__(self, kube: Kube, state: ClusterState, settings: ManagerSettings,
                 metrics: ManagerMetrics, clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.state = state
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.policy = lookup(settings.policy)
        self.leader = not settings.leader_election
        #: The migrations in flight, by id; read and written under :attr:`lock`.
        self.migrations: dict[str, Migration] = {}
        self.start_times: deque[float] = deque()  # for the global rate limit
        self.lock = threading.RLock()
        self.stuck_reported: set[str] = set()  # migrations whose stuck source was reported
        #: Completed migrations whose replacement has not started yet, by id: (the migration,
        #: its replacement pod's name, when to give up); their cost is measured once it runs.
        #: Kept in memory only: a restart in between loses that one measurement.
        self.measuring: dict[str, tuple[Migration, str, float]] = {}
        #: Migrations whose eviction was sent in this run but whose answer was not seen (an
        #: error): a terminating source is then this manager's doing, not its user's.
        self.evictions_sent: set[str] = set()
        #: Observe mode (settings.enforcement): by pod key, the target of the move last told
        #: as would-be (specon_manager.migration.observe).
        self.observing = settings.enforcement == "observe"
        self.would_moves: dict[str, str] = {}
        #: Test hook: called with a phase name after the record of that phase is written.
        self.after_phase: Callable[[str], None] | None = None
        #: The watch caches of the nodes and of the migratable pods (specon_manager.service
        #: starts them); while one is not current, its reads go to the API server.
        self.nodes: WatchCache | None = None
        self.pods: WatchCache | None = None

    # -- what the phases read --------------------------------------------------------------------
    def in_flight(self) -> list[Migration]:
        with self.lock:
            return list(self.migrations.values())

    def busy_nodes(self) -> set[str]:
        with self.lock:
            return {n for m in self.migrations.values() for n in (m.source, m.target)}

    def cordoned(self) -> set[str]:
        """Nodes marked unschedulable: never a target (from the node cache, current within a
        watch event; without it, asked with a field selector that keeps the answer small)."""
        if self.nodes is not None and self.nodes.current:
            return {meta(n)["name"] for n in self.nodes.items()
                    if (n.get("spec") or {}).get("unschedulable")}
        return {meta(n)["name"] for n in self.kube.list(
            "/api/v1/nodes", fieldSelector="spec.unschedulable=true")}

    def all_nodes(self, **params: str) -> list[dict[str, Any]]:
        """The nodes (from the node cache; without it, listed with ``params``, which only
        narrow the answer: the caller judges each node itself)."""
        if self.nodes is not None and self.nodes.current:
            return self.nodes.items()
        return self.kube.list("/api/v1/nodes", **params)

    def migratable_pods(self) -> list[dict[str, Any]]:
        """Every pod labelled ``specon.io/migratable=true``, cluster-wide: what the rounds plan
        on (from the pod cache; without it, listed with that label selector)."""
        if self.pods is not None and self.pods.current:
            return self.pods.items()
        return self.kube.list("/api/v1/pods", labelSelector=f"{LABEL_MIGRATABLE}=true")

    # -- what the phases write -------------------------------------------------------------------
    def set(self, m: Migration, **changes: Any) -> Migration:
        """``m`` with ``changes``, kept as the migration in flight (in memory only)."""
        m = replace(m, **changes)
        self.migrations[m.id] = m
        return m

    def write_source(self, m: Migration) -> None:
        """Record ``m`` on its source pod (uid precondition: never on a namesake)."""
        self.kube.patch(pod_path(m.namespace, m.pod), {"metadata": {
            "uid": m.pod_uid, "labels": {L_MIGRATING: "true"},
            "annotations": {A_MIGRATION: m.record()}}})

    def mark(self, pod: dict[str, Any], job: dict[str, Any] | None,
             values: dict[str, str]) -> None:
        """Annotate the job's object (its owner, else the pod) with ``values``."""
        if job is not None:
            self.kube.patch(owner_path(str(job["kind"]), meta(job)["namespace"],
                                       meta(job)["name"]),
                            {"metadata": {"uid": meta(job)["uid"], "annotations": values}})
        else:
            self.kube.patch(pod_path(meta(pod)["namespace"], meta(pod)["name"]),
                            {"metadata": {"uid": meta(pod)["uid"], "annotations": values}})

    def hook(self, phase: str) -> None:
        if self.after_phase is not None:
            self.after_phase(phase)

    def event(self, obj: dict[str, Any], reason: str, message: str,
              kind: str = "Pod", warning: bool = False) -> None:
        md = meta(obj)
        body = event_body(obj, reason, message, action="Migrate", kind=kind, warning=warning)
        try:
            self.kube.create(events_path(md["namespace"]), body)
        except (KubeError, OSError) as exc:  # an event is never worth failing a migration
            log.warning("event %s on %s/%s not recorded: %s", reason, md["namespace"],
                        md["name"], exc)

    @staticmethod
    def pod_ref(m: Migration) -> dict[str, Any]:
        """The source pod, as an event's object."""
        return {"apiVersion": "v1",
                "metadata": {"name": m.pod, "namespace": m.namespace, "uid": m.pod_uid}}

    @staticmethod
    def replacement_name(m: Migration) -> str:
        """The name of a bare pod's (pinned) replacement."""
        return f"{m.pod[:240]}-m{m.id[:6]}"
