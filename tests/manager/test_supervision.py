"""The manager's background loop never dies silently, its health follows the loop, and a
leader that cannot renew its Lease stops writing within the renew deadline (issue 15).

The loop runs against real sockets: a loopback port nobody listens on (the API server away),
and, for the Lease, the real API server of the test plane. Two faults the real parts cannot
produce on demand are injected and named as such: a bug (a pass that raises a plain
exception) and a hung pass (one that blocks). Time-dependent rules are checked with a clock
the test moves, never by measuring wall-clock time."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from planelib import Plane
from planemanager import wait_for
from servelib import serve

from specon_manager.kube import FENCED, TRANSPORT, Kube, KubeError
from specon_manager.leader import LeaseElector
from specon_manager.metrics import ManagerMetrics
from specon_manager.service import Service, build
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def dead_url() -> str:
    """A loopback port nobody listens on: every call is refused (a real transport error)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def wait_until(what: str, fn: Callable[[], Any], timeout: float = 20) -> Any:
    return wait_for(what, fn, timeout=timeout, every=0.02)


def errors(metrics: ManagerMetrics, kind: str) -> float:
    return metrics.loop_errors.labels(kind)._value.get()


@pytest.fixture
def settings() -> ManagerSettings:
    return ManagerSettings(reconcile_period_s=0.05, rebalance=False, loop_backoff_max_s=0.2,
                           verify_reported_pods=False, agent_auth="static")


def service(settings: ManagerSettings, kube: Kube, clock: Callable[[], float] = time.monotonic,
            ) -> Service:
    return Service(settings, ClusterState(stale_after_s=30), ManagerMetrics(), kube, clock=clock)


def test_the_loop_survives_an_unreachable_api_server_and_a_bug(settings: ManagerSettings) -> None:
    kube = Kube(dead_url(), timeout=1)
    svc = service(settings, kube)
    assert svc.controller is not None
    svc.start()
    try:
        # The API server is away: every pass fails (the node cache's refresh, then the
        # controller's restore), the loop goes on, counted, and this replica is not ready.
        wait_until("three failed passes", lambda: errors(svc.metrics, "kubernetes") >= 3)
        assert svc.health() is None
        assert svc.readiness() == "the controller loop has not completed a pass yet"
        assert not svc.leading  # restore() never succeeded, so it never acted

        # Fault injection (a bug): the pass raises a plain exception, which the old loop did
        # not catch (its thread died and /healthz went on answering ok).
        svc.nodes = None
        real_restore = svc.controller.restore

        def bug() -> None:
            raise RuntimeError("fault injection: a bug in the controller")

        svc.controller.restore = bug  # type: ignore[method-assign]
        wait_until("a pass failing with the bug", lambda: errors(svc.metrics, "bug") >= 2)
        assert svc._thread is not None and svc._thread.is_alive()
        assert svc.health() is None and svc.readiness() is not None

        # The bug fixed, the API server still away: back to counted transport failures.
        svc.controller.restore = real_restore  # type: ignore[method-assign]
        before = errors(svc.metrics, "kubernetes")
        wait_until("another failed pass", lambda: errors(svc.metrics, "kubernetes") > before)
        assert svc.readiness() is not None and svc.health() is None
    finally:
        svc.stop()
        kube.close()


def test_healthz_and_readyz_follow_the_loop_not_the_http_thread(
        settings: ManagerSettings) -> None:
    clock = Clock()
    svc = service(settings.model_copy(update={"migration": False}), Kube(dead_url()), clock)
    svc.nodes = None  # nothing of the API in a pass: each succeeds
    release = threading.Event()
    hung = threading.Event()
    real_pass = svc._pass

    def maybe_hang(due: dict[str, float]) -> None:
        if hung.is_set():
            release.wait(30)  # fault injection: a pass that hangs (a call that never returns)
        real_pass(due)

    svc._pass = maybe_hang  # type: ignore[method-assign]
    svc.start()
    try:
        wait_until("a successful pass", lambda: svc.last_pass is not None)
        assert svc.readiness() is None and svc.health() is None
        hung.set()
        clock.now += 1  # a pass in flight when the fault hits finishes at this time
        time.sleep(0.2)
        last = svc.last_pass
        assert last is not None
        # The rule, on the test's clock: ready while the last success is at most two periods
        # old, i.e. until one period after the first pass the loop misses; unready after.
        clock.now = last + svc.stale_s - 1e-6
        assert svc.readiness() is None
        clock.now = last + svc.stale_s + 1e-6
        assert svc.stale_s == 2 * svc.period
        assert svc.readiness() is not None and "last successful pass" in str(svc.readiness())
        # Alive but not turning at all: unhealthy once loop_stall_s has passed.
        assert svc.health() is None
        clock.now = (svc.last_turn or last) + settings.loop_stall_s + 1
        assert svc.health() is not None and "has not turned" in str(svc.health())
    finally:
        release.set()
        svc.stop()


def test_the_endpoints_answer_what_the_loop_says(settings: ManagerSettings) -> None:
    app, svc = build(settings.model_copy(update={"migration": False}), Kube(dead_url()))
    svc.started_at = time.monotonic()
    svc._thread = threading.Thread(target=lambda: None)  # a loop thread that has ended
    svc._thread.start()
    svc._thread.join()
    with serve(app) as url, httpx.Client(base_url=url, timeout=10) as client:
        r = client.get("/healthz")
        assert r.status_code == 503 and r.text == "the controller loop is not running"
        assert client.get("/readyz").status_code == 503


# -- the Lease on the real API server -------------------------------------------------------------

@pytest.fixture
def plane_kube(plane: Plane) -> Iterator[Kube]:
    kube = Kube.from_kubeconfig(plane.kubeconfig)
    yield kube
    kube.close()


@pytest.mark.plane
def test_a_leader_that_cannot_renew_stops_writing_within_the_renew_deadline(
        plane_kube: Kube, plane_namespace: str) -> None:
    ns, lease = plane_namespace, f"lease-{uuid.uuid4().hex[:6]}"
    a_clock, b_clock = Clock(), Clock()
    a = LeaseElector(plane_kube, ns, lease, "replica-a", duration_s=15, clock=a_clock,
                     renew_deadline_s=10)
    b = LeaseElector(plane_kube, ns, lease, "replica-b", duration_s=15, clock=b_clock,
                     renew_deadline_s=10)
    writer = plane_kube.fenced(a.check)
    cm_path = f"/api/v1/namespaces/{ns}/configmaps"

    def record(value: str) -> None:  # a controller write (a migration record, say)
        writer.patch(f"{cm_path}/record", {"data": {"by": value}})

    assert a.try_acquire_or_renew() and a.holds()
    plane_kube.create(cm_path, {"metadata": {"name": "record"}, "data": {"by": "none"}})
    record("a-1")
    assert not b.try_acquire_or_renew()  # a holds it

    # A cannot renew (partitioned, paused): its clock runs on, its renewals do not happen.
    a_clock.now += 9.9
    record("a-2")  # still inside its renew deadline
    a_clock.now += 0.2  # 10.1 s after its last renewal began: past the deadline
    assert not a.holds()
    with pytest.raises(KubeError) as refused:
        record("a-3")
    assert refused.value.status == FENCED and "renew deadline" in str(refused.value)
    data = plane_kube.get(f"{cm_path}/record")
    assert data is not None and data["data"] == {"by": "a-2"}  # nothing reached the server

    # B takes the Lease once the record has not changed for a lease duration by its clock,
    # which is after A stopped writing (10 s < 15 s).
    b_clock.now += 15.1
    assert b.try_acquire_or_renew() and b.holds()
    held = plane_kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{lease}")
    assert held is not None and held["spec"]["holderIdentity"] == "replica-b"
    # A tries again: B holds it, so A stays fenced.
    assert not a.try_acquire_or_renew() and not a.holds()
    with pytest.raises(KubeError):
        record("a-4")


@pytest.mark.plane
def test_the_service_stops_acting_when_its_renewals_fail(
        plane: Plane, plane_namespace: str) -> None:
    """The whole loop, on the real API server: it leads; then its API server becomes
    unreachable (the Service's client pointed at a dead port): within the renew deadline it
    stops leading, its controller refuses requests, its fenced writes are refused."""
    clock = Clock()
    settings = ManagerSettings(
        leader_election=True, lease_namespace=plane_namespace, lease_name="svc-lease",
        identity="replica-a", lease_duration_s=15, renew_period_s=2, renew_deadline_s=10,
        reconcile_period_s=0.05, rebalance=False, loop_backoff_max_s=0.1,
        verify_reported_pods=False, agent_auth="static")
    kube = Kube.from_kubeconfig(plane.kubeconfig)
    svc = Service(settings, ClusterState(stale_after_s=30), ManagerMetrics(), kube, clock=clock)
    assert svc.controller is not None and svc.elector is not None
    svc.nodes = None
    svc.start()
    try:
        wait_until("leading", lambda: svc.leading and svc.controller.ready())
        # The API server goes away for this replica (its client's calls are refused now).
        svc.elector.kube = Kube(dead_url(), timeout=1)
        clock.now += 2.5  # a renewal is due: it fails, but the deadline has not passed
        wait_until("a failed renewal", lambda: errors(svc.metrics, "kubernetes") >= 1)
        assert svc.leading
        clock.now += 8  # 10.5 s since the last renewal began
        wait_until("leadership dropped", lambda: not svc.leading)
        assert not svc.controller.ready() and svc.metrics.leader._value.get() == 0
        with pytest.raises(KubeError) as refused:
            svc.controller.kube.create(f"/api/v1/namespaces/{plane_namespace}/configmaps",
                                       {"metadata": {"name": "late"}})
        assert refused.value.status == FENCED
        assert svc.metrics.fenced_writes._value.get() >= 1
        assert kube.get(f"/api/v1/namespaces/{plane_namespace}/configmaps/late") is None
    finally:
        svc._stop.set()
        for cache in svc.caches:  # their watches use the client: stopped before it closes
            cache.stop()
        if svc._thread is not None:
            svc._thread.join(10)
        kube.close()


def test_bad_lease_timings_are_refused_with_the_rule() -> None:
    with pytest.raises(ValueError, match="renew_period_s < renew_deadline_s < lease_duration_s"):
        ManagerSettings(leader_election=True, lease_duration_s=15, renew_deadline_s=20,
                        agent_auth="static")
    # unset, the deadline is two thirds of the duration
    unset = ManagerSettings(lease_duration_s=6, renew_period_s=1, agent_auth="static")
    assert unset.lease_renew_deadline_s == 4
    assert TRANSPORT != FENCED
