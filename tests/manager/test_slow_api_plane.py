"""Issue 32, item 4: a slow API server must still leave one steady leader.

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

import pytest
from planelib import Plane
from planemanager import wait_for
from slowproxy import SlowProxy

from specon_manager.kube import Kube
from specon_manager.metrics import ManagerMetrics
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

