"""Issue 32, item 4: a slow API server must still leave one steady leader, and a migration the
fence stops must end in a clear state.

On the test plane's real kube-apiserver. The slowness is injected (tests/manager/slowproxy.py,
a fault the real part cannot produce on demand): each request 1-3 s late. Before the renewals
had a thread of their own, a replica renewed between passes: the start-up restore (seven
requests: the Lease, then five lists) outlasted the renew deadline, and leadership was gained
and lost in the same millisecond, over and over, with no replica ever ready."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from planelib import Plane
from planemanager import Api, running_on, train_pod, wait_for
from slowproxy import SlowProxy

from specon_manager.kube import Kube, pod_path
from specon_manager.leader import LeaseElector
from specon_manager.metrics import ManagerMetrics
from specon_manager.migration import A_MIGRATION, Migration, MigrationController
from specon_manager.service import Service
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState

pytestmark = pytest.mark.plane

RENEW_PERIOD_S = 2.0


@pytest.fixture
def slow_api(plane: Plane) -> Iterator[SlowProxy]:
    host, port = plane.server.removeprefix("https://").rsplit(":", 1)
    proxy = SlowProxy((host, int(port)), delay=(1.0, 3.0), seed=32).start()
    yield proxy
    proxy.close()


def transitions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.threadName}: {r.getMessage()}" for r in caplog.records
            if r.getMessage().startswith(("leader: acquired", "leader: lost"))]


def test_two_replicas_on_a_slow_api_server_elect_one_leader_that_stays_and_is_ready(
        plane: Plane, plane_namespace: str, slow_api: SlowProxy,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="specon_manager")
    lease = f"slow-{uuid.uuid4().hex[:6]}"
    replicas: list[Service] = []
    for name in ("replica-a", "replica-b"):
        settings = ManagerSettings(
            leader_election=True, lease_namespace=plane_namespace, lease_name=lease,
            identity=name, lease_duration_s=15, renew_period_s=RENEW_PERIOD_S,
            renew_deadline_s=10, reconcile_period_s=2, rebalance=False,
            verify_reported_pods=False, agent_auth="static")
        kube = Kube(slow_api.url, token=plane.admin_token, ca_file=str(plane.ca_file))
        replicas.append(Service(settings, ClusterState(stale_after_s=30), ManagerMetrics(), kube))
    for svc in replicas:
        svc.start()

    def ready() -> list[Service]:
        return [s for s in replicas if s.leading and s.controller is not None
                and s.controller.ready() and s.readiness() is None]

    try:
        try:
            leader = wait_for("a ready leader", ready, timeout=75, every=0.1)[0]
        except AssertionError as exc:
            raise AssertionError(f"{exc}; leadership changes: {transitions(caplog)}") from None
        assert slow_api.delayed > 7  # the fault was there
        # It stays the leader, ready, for more than three renew periods; the other stands by.
        end = time.monotonic() + 4 * RENEW_PERIOD_S
        while time.monotonic() < end:
            assert ready() == [leader], transitions(caplog)
            time.sleep(0.1)
        assert len(transitions(caplog)) == 1, transitions(caplog)  # one gain, no loss
    finally:
        for svc in replicas:
            svc.stop()
            assert svc.kube is not None
            svc.kube.close()


def test_a_migration_the_fence_stops_is_handed_to_the_next_leader(
        plane: Plane, plane_namespace: str, caplog: pytest.LogCaptureFixture) -> None:
    """The Lease's renew deadline passes between a migration's first record and its next step
    (the fault, injected with the clock the elector reads): the step is refused (Fenced), the
    agent is told the job moves, the replica hands the migration over, and the next leader
    resumes it from the record; one line each."""
    caplog.set_level(logging.INFO, logger="specon_manager")
    ns, tag = plane_namespace, f"f{uuid.uuid4().hex[:6]}"
    nodes = plane.add_nodes(2, prefix=tag, labels={"specon-test": tag})
    kube = Kube.from_kubeconfig(plane.kubeconfig)
    api = Api(plane)
    try:
        kube.create(pod_path(ns), train_pod("fenced", tag, "default-scheduler", node=nodes[0]))
        wait_for("the pod running", lambda: running_on(api, ns, "fenced"))
        now = [1000.0]
        elector = LeaseElector(kube, ns, f"fence-{tag}", "replica-a", duration_s=15,
                               clock=lambda: now[0], renew_deadline_s=10)
        assert elector.try_acquire_or_renew()
        settings = ManagerSettings(leader_election=True, lease_namespace=ns,
                                   verify_reported_pods=False, agent_auth="static")
        a = MigrationController(kube.fenced(elector.check), ClusterState(stale_after_s=30),
                                settings, ManagerMetrics())
        a.leader = True

        def deadline_passes(phase: str) -> None:
            if phase == "reserved":
                now[0] += 11  # fault injection: this replica's renewals stop here

        a.after_phase = deadline_passes
        pod = kube.get(pod_path(ns, "fenced"))
        assert pod is not None
        reply = a.start(pod, target=nodes[1])
        assert reply.decision == "migrate" and reply.target == nodes[1]
        [m] = a.in_flight()
        fenced = [r.getMessage() for r in caplog.records if ": fenced," in r.getMessage()]
        assert fenced == [f"migration {m.id} ({ns}/fenced, phase reserved): fenced, this "
                          "replica no longer holds the Lease; its last record stays, and the "
                          "next leader resumes it from there"]
        record: Any = (kube.get(pod_path(ns, "fenced")) or {})["metadata"]["annotations"]
        recorded = Migration.from_record(record[A_MIGRATION])
        assert recorded is not None and (recorded.id, recorded.phase) == (m.id, "reserved")

        a.hand_over()  # what the Service does once it stops leading
        assert a.in_flight() == [] and not a.ready()
        assert a.state.reservation(m.key) is None
        assert f"migration {m.id} ({ns}/fenced): handed over to the next leader" in caplog.text

        b = MigrationController(kube, ClusterState(stale_after_s=30), settings, ManagerMetrics())
        b.restore()  # the next leader
        assert [(x.id, x.phase) for x in b.in_flight()] == [(m.id, "reserved")]
        assert f"migration {m.id} ({ns}/fenced, {nodes[0]} -> {nodes[1]}) resumed from its " \
               "record in phase reserved" in caplog.text
    finally:
        api.close()
        kube.close()
