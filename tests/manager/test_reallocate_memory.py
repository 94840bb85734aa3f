"""Issue 32, item 4: an agent's reallocation request that a migration in flight on its node
refuses is answered from memory, with no API round trip (with a slow API server, each costs
seconds). The API server here is a loopback port nobody listens on: a request that reached
for it would fail."""

from __future__ import annotations

import socket

from specon.wire import ReallocationRequest
from specon_manager.kube import Kube
from specon_manager.metrics import ManagerMetrics
from specon_manager.migration import Migration, MigrationController
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState


def dead_kube() -> Kube:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return Kube(f"http://127.0.0.1:{port}", timeout=1)


def controller() -> MigrationController:
    ctl = MigrationController(dead_kube(), ClusterState(stale_after_s=30),
                              # a policy whose agents ask to move (the shipped one plans
                              # moves itself and answers every request "stay")
                              ManagerSettings(kubernetes=False, agent_auth="static",
                                              policy="paper"),
                              ManagerMetrics())
    m = Migration(id="abcdef123456", namespace="ns", pod="p", pod_uid="u-p", source="w1",
                  target="w2", kind="pod", owner="", owner_uid="", reason="converged",
                  phase="checkpointing", started=0.0, deadline=1e12)
    ctl.migrations[m.id] = m
    return ctl


def ask(ctl: MigrationController, node: str, pod: str) -> tuple[str, str]:
    reply = ctl.reallocate(node, ReallocationRequest(node=node, namespace="ns", pod=pod,
                                                     time=0.0))
    return reply.decision, reply.reason


def test_a_busy_nodes_request_is_refused_without_the_api_server() -> None:
    ctl = controller()
    assert ask(ctl, "w1", "p") == ("refused", "already migrating")
    assert ask(ctl, "w1", "q") == ("refused", "a migration is in flight on node w1")
    assert ask(ctl, "w2", "r") == ("refused", "a migration is in flight on node w2")
