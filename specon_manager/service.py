"""Wires the manager together: state, API, Kubernetes client, migration controller, rebalancer
and leader election, with the background loop that drives them."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from specon.core.policy import lookup
from specon.core.scoring import Weights
from specon.wire import LABEL_MIGRATABLE
from specon_manager.app import create_app
from specon_manager.identity import TOKENREVIEW_PATH, TokenReviewer
from specon_manager.kube import Kube, KubeError, event_body, events_path, meta, pod_path
from specon_manager.leader import LeaseElector
from specon_manager.metrics import ManagerMetrics
from specon_manager.migration import MigrationController
from specon_manager.node_speed import NodeSpeeds
from specon_manager.planner import MovePlanner
from specon_manager.pod_state import PodStateWriter
from specon_manager.pods import PodDirectory
from specon_manager.qos_book import EventPoster, QosBook
from specon_manager.rate_limit import TokenBucket
from specon_manager.rebalance import Rebalancer
from specon_manager.review_limit import ReviewLimiter
from specon_manager.settings import ManagerSettings
from specon_manager.shutdown_handover import hand_over_gated
from specon_manager.state import ClusterState
from specon_manager.watch_cache import WatchCache

log = logging.getLogger(__name__)


class NodeCache:
    """Whether a node exists, from the node watch cache: None (cannot tell) until it is
    listed and whenever its watch is down and the name is not in the copy, so that a heartbeat
    is never refused for want of an answer. No API request per name, known or not."""

    def __init__(self, nodes: WatchCache) -> None:
        self.nodes = nodes

    def exists(self, name: str) -> bool | None:
        if self.nodes.get(name) is not None:
            return True
        return False if self.nodes.current else None


class Service:
    """The background loop (restore, reconcile, rebalance, node cache) and, with leader
    election, the Lease's renewals on a thread of their own.

    The loop is supervised: no error ends it. A pass that fails (the API server away, a bug) is
    logged and counted (``specon_manager_controller_loop_errors_total{kind}``) and the next one
    waits longer, doubling up to ``loop_backoff_max_s``. :meth:`health` (``/healthz``) and
    :meth:`readiness` (``/readyz``) follow the loop itself, not the HTTP thread: unhealthy
    when it is dead or has not turned for ``loop_stall_s``, unready when no pass has succeeded
    for ``loop_stale_s`` (by default two loop periods: within one period of the first pass it
    misses). A leader that cannot renew its Lease within the renew deadline stops acting, and
    every write of the controller and rebalancer is fenced by the same deadline.

    The renewals never wait behind the loop: with a slow API server a restore or a pass takes
    longer than the renew deadline, and a leader renewing between passes lost the Lease it had
    just gained (issue 32). A replica that gains the Lease restores the migrations in flight on
    the loop's thread while the renewals go on, and leads (and is ready) once that is done, if
    it still holds the same term of the Lease."""

    def __init__(self, settings: ManagerSettings, state: ClusterState, metrics: ManagerMetrics,
                 kube: Kube | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.state = state
        self.metrics = metrics
        self.kube = kube
        self.clock = clock
        self.controller: MigrationController | None = None
        self.rebalancer: Rebalancer | MovePlanner | None = None
        self.elector: LeaseElector | None = None
        self.nodes: NodeCache | None = None
        #: The watch caches the rounds read (docs/manager.md, "What the manager reads").
        self.caches: list[WatchCache] = []
        #: Keeps the pods' specon.io/state annotation (set by build(), on the leader's passes).
        self.pod_state: PodStateWriter | None = None
        self.writer: Kube | None = kube  # fenced by the Lease with leader election
        if kube is not None:
            node_cache = WatchCache(kube, "/api/v1/nodes", "nodes")
            self.caches.append(node_cache)
            self.nodes = NodeCache(node_cache)
            state.node_speed = NodeSpeeds(node_cache.get).speed
            writer = kube
            if settings.leader_election:
                identity = settings.identity or os.environ.get("POD_NAME") or (
                    f"{socket.gethostname()}-{os.getpid()}")
                deadline = settings.lease_renew_deadline_s
                # A renewal answered after the deadline is worth nothing.
                self.elector = LeaseElector(kube.with_timeout(deadline), settings.lease_namespace,
                                            settings.lease_name, identity,
                                            settings.lease_duration_s, clock=clock,
                                            renew_deadline_s=deadline)
                writer = kube.fenced(self._fence)
                self.writer = writer
            if settings.migration:
                self.controller = MigrationController(writer, state, settings, metrics)
                if settings.fault_exit_after_phase:
                    self.controller.after_phase = _fault_exit(settings.fault_exit_after_phase)
                rounds = ROUNDS[lookup(settings.policy).moves]
                if rounds is not None and (rounds is not Rebalancer or settings.rebalance):
                    self.rebalancer = rounds(writer, state, self.controller, settings, metrics)
                    self.controller.pods = WatchCache(
                        kube, "/api/v1/pods", "migratable-pods",
                        labelSelector=f"{LABEL_MIGRATABLE}=true")
                    self.caches.append(self.controller.pods)
                self.controller.nodes = node_cache
        self.period = settings.reconcile_period_s
        self.stale_s = settings.loop_stale_s or 2 * self.period
        self.leading = False
        self._term = 0  # the elector's term this replica restored for and leads in
        self._hand_over = False  # lost the lead: the loop lets go of the migrations in flight
        self._leading_lock = threading.Lock()  # the lease thread and the loop set `leading`
        self.failures = 0  # passes failed in a row
        self.started_at: float | None = None
        self.pass_started: float | None = None  # clock() when the pass now running began
        self.last_pass: float | None = None  # clock() when the last pass succeeded
        self.last_turn: float | None = None  # clock() when the last pass ended, either way
        self._stop = threading.Event()
        self._wake = threading.Event()  # the lease was gained: the loop restores now
        self._thread: threading.Thread | None = None
        self._lease_thread: threading.Thread | None = None

    def start(self) -> None:
        if self.kube is None:
            return
        self.started_at = self.clock()
        for cache in self.caches:
            cache.start()
        if self.elector is not None:
            self._lease_thread = threading.Thread(target=self._renew_loop, name="specon-lease",
                                                  daemon=True)
            self._lease_thread.start()
        self._thread = threading.Thread(target=self._run, name="specon-controller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for cache in self.caches:
            cache.stop()
        for t in (self._thread, self._lease_thread):
            if t is not None:
                t.join(10)
        # The lease thread has stopped: the handover renews the Lease itself meanwhile.
        self._hand_over_gated()
        if self.elector is not None and self.kube is not None:
            try:
                self.elector.release()
            except (KubeError, OSError) as exc:
                log.warning("lease not released: %s", exc)

    def _hand_over_gated(self) -> None:
        """The leader's last act: no bare pod's replacement left behind its gate
        (specon_manager/shutdown_handover.py), the Lease renewed meanwhile."""
        if self.controller is None or not self.leading or self.settings.shutdown_handover_s <= 0:
            return
        if self._thread is not None and self._thread.is_alive():
            log.warning("shutdown: the controller loop is still in a pass; nothing handed over")
            return
        renewed: list[float] = []
        elector = self.elector

        def keep_lease() -> bool:
            if elector is None:
                return True
            if not renewed or self.clock() - renewed[-1] >= self.settings.renew_period_s:
                try:
                    if not elector.try_acquire_or_renew():
                        return False
                except (KubeError, OSError) as exc:
                    log.warning("shutdown: lease not renewed: %s", exc)
                    return elector.holds()
                renewed.append(self.clock())
            return elector.holds()

        try:
            hand_over_gated(self.controller, self.settings.shutdown_handover_s, keep_lease)
        except (KubeError, OSError) as exc:
            log.warning("shutdown: migrations not handed over: %s", exc)

    # -- health -----------------------------------------------------------------------------
    def health(self) -> str | None:
        """Why the loop is not alive (None: it is, or this manager runs none)."""
        if self._thread is None or self.started_at is None:
            return None
        if not self._thread.is_alive():
            return "the controller loop is not running"
        since = self.clock() - (self.last_turn or self.started_at)
        if since > self.settings.loop_stall_s:
            return f"the controller loop has not turned for {since:.0f} s"
        return None

    def readiness(self) -> str | None:
        """Why this replica should get no traffic (None: ready). Alive, a pass succeeded within
        ``stale_s``, and (checked by the caller) the controller restored and leading."""
        why = self.health()
        if why is not None or self._thread is None:
            return why
        if self.last_pass is None:
            return "the controller loop has not completed a pass yet"
        fresh = self.last_pass
        if self.failures == 0 and self.pass_started is not None:
            # A pass under way after a good one counts from its start: with a slow API server
            # a good pass takes seconds, and the leader must not flap unready in each.
            fresh = max(fresh, self.pass_started)
        since = self.clock() - fresh
        if since > self.stale_s:
            return (f"the controller loop's last successful pass was {since:.1f} s ago "
                    f"({self.failures} failed since)")
        return None

    # -- leadership -------------------------------------------------------------------------
    def _fence(self) -> None:
        assert self.elector is not None
        try:
            self.elector.check()
        except KubeError:
            self.metrics.fenced_writes.inc()
            raise

    def _set_leading(self, leading: bool, why: str = "") -> None:
        was = self.leading
        self.leading = leading
        if self.controller is not None:
            self.controller.leader = leading
        self.metrics.leader.set(1 if leading else 0)
        if leading != was:
            self._hand_over = not leading
            log.info("leader: %s%s", "acquired" if leading else "lost", why)

    def _check_lease(self) -> None:
        """Stop leading once the Lease is not held (the renew deadline passed since the last
        renewal was sent) or is held in a later term than the one restored for."""
        assert self.elector is not None
        with self._leading_lock:
            if self.leading and not self.elector.holds():
                self._set_leading(False, " (not renewed within the renew deadline)")
            elif self.leading and self.elector.term != self._term:
                self._set_leading(False, " (the Lease was held again after a gap)")

    def _lead(self) -> None:
        """Restore the migrations in flight, then lead: at once without leader election, else
        if the Lease is still held in the term it was held in when the restore began (the
        renewals go on meanwhile, on their own thread). A failed restore leaves the replica
        not leading; the next pass tries again."""
        if self.elector is None:
            if self.controller is not None:
                self.controller.restore()
            self._set_leading(True)
            return
        term = self.elector.term
        started = self.clock()
        if self.controller is not None:
            self.controller.restore()
        with self._leading_lock:
            if self.elector.holds() and self.elector.term == term:
                self._term = term
                self._set_leading(True, f" (restored in {self.clock() - started:.1f} s)")
            else:
                log.info("lease lost while restoring: not leading")

    def _renew_loop(self) -> None:
        """The Lease's renewals, every ``renew_period_s`` from the start of the last (back to
        back when the API server is slower than that), and the check of the renew deadline in
        between: nothing else runs on this thread."""
        assert self.elector is not None
        s = self.settings
        elector = self.elector
        due = self.clock()
        while not self._stop.is_set():
            if self.clock() >= due:
                due = self.clock() + s.renew_period_s
                try:
                    elector.try_acquire_or_renew()
                except (KubeError, OSError) as exc:
                    self.metrics.loop_errors.labels("kubernetes").inc()
                    log.warning("lease not renewed: %s", exc)
                except Exception:  # supervised: nothing ends the renewals
                    self.metrics.loop_errors.labels("bug").inc()
                    log.exception("lease renewal failed")
                if not self.leading and elector.holds():
                    self._wake.set()
            self._check_lease()
            wait = due - self.clock()
            at = elector.renewed_at
            if self.leading and at is not None:  # wake at the deadline, to stop in time
                wait = min(wait, at + elector.renew_deadline_s - self.clock())
            self._stop.wait(min(max(wait, 0.01), s.renew_period_s))

    # -- the loop ---------------------------------------------------------------------------
    def _run(self) -> None:
        s = self.settings
        due = {"rebalance": 0.0}
        while not self._stop.is_set():
            try:
                self._pass(due)
            except Exception as exc:  # supervised: nothing ends the loop
                self.failures += 1
                kind = "kubernetes" if isinstance(exc, KubeError | OSError) else "bug"
                self.metrics.loop_errors.labels(kind).inc()
                if kind == "bug":
                    log.exception("controller loop: pass failed")
                else:
                    log.warning("controller loop: %s", exc)
                delay = min(self.period * 2 ** min(self.failures, 16), s.loop_backoff_max_s)
            else:
                self.failures = 0
                self.last_pass = self.clock()
                delay = self.period
            self.last_turn = self.clock()
            self._wake.wait(delay)
            self._wake.clear()

    def _pass(self, due: dict[str, float]) -> None:
        s = self.settings
        now = self.pass_started = self.clock()
        if self.elector is not None:
            self._check_lease()
            if self._hand_over and not self.leading and self.controller is not None:
                self.controller.hand_over()
                self._hand_over = False
        if not self.leading and (self.elector is None or self.elector.holds()):
            self._lead()
        if self.leading and self.controller is not None:
            self.controller.reconcile()
        if (self.leading and self.rebalancer is not None
                and now - due["rebalance"] >= s.rebalance_period_s):
            due["rebalance"] = now
            self.rebalancer.run_once()
        if self.leading and self.pod_state is not None:
            self.pod_state.run_once()


#: What runs every ``rebalance_period_s`` for a policy's move rule (settings.MOVE_RULES):
#: Algorithm 5's rounds (beside Algorithm 4 on the agents' requests; off with ``rebalance``),
#: the progress-aware plan, or nothing.
ROUNDS: dict[str, type[Rebalancer] | type[MovePlanner] | None] = {
    "specon": Rebalancer, "progress": MovePlanner, "none": None}


def _fault_exit(phase: str) -> Any:
    def hook(reached: str) -> None:
        if reached == phase:
            log.warning("fault injection: exiting after phase %s", phase)
            logging.shutdown()
            os._exit(137)

    return hook


def _warning_sender(kube: Kube) -> Any:
    """Posts a Warning event on a pod (what :class:`QosBook` reports a malformed spec with)."""
    def send(pod: Any, reason: str, message: str) -> None:
        # The pod comes from a caller's body: post only on the pod the API server has under
        # that name with that UID, with the API's metadata (never the caller's text as object).
        given: dict[str, Any] = dict(meta(pod))
        ns, name, uid = given.get("namespace"), given.get("name"), given.get("uid")
        if not (isinstance(ns, str) and isinstance(name, str) and uid):
            return
        try:
            real = kube.get(pod_path(ns, name))
        except (KubeError, OSError) as exc:
            log.warning("event %s on %s/%s not recorded: %s", reason, ns, name, exc)
            return
        if real is None or meta(real).get("uid") != uid:
            log.info("event %s not posted: no pod %s/%s with uid %s", reason, ns, name, uid)
            return
        md: dict[str, Any] = dict(meta(real))
        try:
            kube.create(events_path(md["namespace"]), event_body(
                {"apiVersion": "v1", "metadata": md}, reason, message, action="ValidateQoS",
                warning=True))
        except (KubeError, OSError) as exc:
            log.warning("event %s on %s/%s not recorded: %s", reason, md.get("namespace"),
                        md.get("name"), exc)

    return send


def build(settings: ManagerSettings, kube: Kube | None = None) -> tuple[FastAPI, Service]:
    """The app and its background service, from settings."""
    state = ClusterState(
        stale_after_s=settings.heartbeat_interval_s * settings.stale_after_intervals,
        weights=Weights(settings.weight_progressing, settings.weight_watching,
                        settings.weight_converged),
        placement=lookup(settings.policy).placement,
        reorder_window_s=settings.heartbeat_reorder_window_s)
    metrics = ManagerMetrics()
    if kube is None and settings.kubernetes:
        kube = (Kube.from_kubeconfig(settings.kubeconfig) if settings.kubeconfig
                else Kube.in_cluster())
    if kube is not None and kube.rate is None:
        kube.rate = TokenBucket(settings.kube_qps, settings.kube_burst)
    service = Service(settings, state, metrics, kube)
    node_exists: Any = service.nodes.exists if service.nodes is not None else None
    poster = EventPoster(_warning_sender(kube)) if kube is not None else None
    qos = QosBook(post=poster, on_invalid=metrics.qos_invalid.inc)
    pods = PodDirectory(kube.get) if kube is not None and settings.verify_reported_pods else None
    if service.writer is not None and settings.pod_state_annotation:
        service.pod_state = PodStateWriter(
            service.writer, state, pods.on_node if pods is not None else None,
            observing=settings.enforcement == "observe")
    auth = None
    if settings.agent_auth_mode == "tokenreview":
        assert kube is not None  # the settings refuse tokenreview without kubernetes
        client = kube

        def review(body: dict[str, Any]) -> dict[str, Any]:
            metrics.token_reviews.inc()
            return client.create(TOKENREVIEW_PATH, body)

        auth = TokenReviewer(
            review, kube.get,
            settings.agent_audience, settings.agent_service_accounts,
            ttl_s=settings.agent_auth_ttl_s, refused_ttl_s=settings.agent_auth_refused_ttl_s,
            max_entries=settings.agent_auth_cache_entries,
            limits=ReviewLimiter(per_s=settings.agent_auth_reviews_per_s))
    app = create_app(settings, state=state, auth=auth, controller=service.controller,
                     node_exists=node_exists, metrics=metrics, qos=qos,
                     pod_on_node=pods.on_node if pods is not None else None, loop=service)
    app.state.events = poster
    app.state.service = service
    return app, service
