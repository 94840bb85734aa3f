"""The pod's ``specon.io/state`` annotation (specon_manager/pod_state.py) on the real API
server: written by the real writer through the real client from heartbeats the manager kept,
checked against the pod directory's real lookups; it appears, follows a category change at
once, is not written again for a small ETA move or within the interval, and is never written
on a pod another node claims. The writer's monotonic clock is injected (fake), so that the
interval is tested without waiting."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from managerlib import heartbeat
from planelib import Plane
from test_kubectl_specon_plane import pod, uids_when_running

from specon.names import ANNOTATION_STATE
from specon.wire import Heartbeat
from specon_manager.kube import Kube
from specon_manager.pod_state import PodStateWriter
from specon_manager.pods import PodDirectory
from specon_manager.service import build
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState

pytestmark = pytest.mark.plane


class Clock:
    """The writer's monotonic clock, stepped by the test (fake)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def state_of(plane: Plane, ns: str, name: str) -> dict[str, Any] | None:
    out = plane.kubectl("get", "pod", "-n", ns, name, "-o", "json").stdout
    raw = (json.loads(out)["metadata"].get("annotations") or {}).get(ANNOTATION_STATE)
    return None if raw is None else dict(json.loads(raw))


def report(node: str, ns: str, uid: str, seq: int, category: str, limit: float,
           eta: float | None, name: str = "train-a") -> Heartbeat:
    job = {"namespace": ns, "pod": name, "container": "main", "uid": uid,
           "category": {"progressing": "PC", "watching": "WC", "converged": "CC"}[category],
           "limit": limit, "predicted_finish_s": eta}
    return Heartbeat.model_validate(heartbeat(node, [job], seq=seq, cpus=4.0))


def written_when_looked_up(writer: PodStateWriter) -> int:
    """Run passes until the pod directory has looked the pods up (in the background)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        n = writer.run_once()
        if n:
            return n
        time.sleep(0.2)
    return 0


def test_the_state_annotation_appears_follows_a_category_and_is_rate_limited(
    plane: Plane, plane_namespace: str
) -> None:
    ns = plane_namespace
    node, other = plane.add_nodes(2, prefix=f"ps{ns[-6:]}")
    for name in ("train-a", "train-b"):
        plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
            pod(name, node, {"specon.io/training": "true"})))
    uid = uids_when_running(plane, ns, {"train-a", "train-b"})
    kube = Kube.from_kubeconfig(plane.kubeconfig)
    state = ClusterState(stale_after_s=90)
    clock = Clock()
    writer = PodStateWriter(kube, state, PodDirectory(kube.get).on_node, min_interval_s=30,
                            clock=clock)

    state.record(report(node, ns, uid["train-a"], 1, "progressing", 0.5, 600.0))
    assert written_when_looked_up(writer) == 1
    first = state_of(plane, ns, "train-a")
    assert first is not None
    assert (first["category"], first["limitCores"], first["node"]) == ("progressing", 2.0, node)
    assert first["predictedCompletion"].endswith("Z")

    # A new limit and an ETA 20 s later, within the interval: not written.
    clock.t += 5
    state.record(report(node, ns, uid["train-a"], 2, "progressing", 0.25, 580.0))
    assert writer.run_once() == 0
    assert state_of(plane, ns, "train-a") == first
    # A category change is written at once, interval or not.
    clock.t += 1
    state.record(report(node, ns, uid["train-a"], 3, "converged", 0.25, 580.0))
    assert writer.run_once() == 1
    now = state_of(plane, ns, "train-a")
    assert now is not None and (now["category"], now["limitCores"]) == ("converged", 1.0)
    # Past the interval: an ETA that moved by under 60 s and an unchanged limit are not
    # written; a limit that moved is.
    clock.t += 60
    state.record(report(node, ns, uid["train-a"], 4, "converged", 0.25, 550.0))
    assert writer.run_once() == 0
    state.record(report(node, ns, uid["train-a"], 5, "converged", 0.5, 550.0))
    assert writer.run_once() == 1
    assert state_of(plane, ns, "train-a")["limitCores"] == 2.0  # type: ignore[index]

    # Another node's agent claims train-b (it runs on `node`): never written.
    state.record(report(other, ns, uid["train-b"], 1, "watching", 1.0, None, name="train-b"))
    for _ in range(10):
        writer.run_once()
        time.sleep(0.2)
    assert state_of(plane, ns, "train-b") is None


def test_the_managers_loop_keeps_the_annotation(plane: Plane, plane_namespace: str) -> None:
    """build() wires the writer into the loop's passes (on by default, off when turned off)."""
    ns = plane_namespace
    node = plane.add_nodes(1, prefix=f"pl{ns[-6:]}")[0]
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
        pod("train-a", node, {"specon.io/training": "true"})))
    uid = uids_when_running(plane, ns, {"train-a"})["train-a"]
    kube = Kube.from_kubeconfig(plane.kubeconfig)
    settings = dict(kubernetes=False, leader_election=False, reconcile_period_s=0.5,
                    rebalance_period_s=3600, heartbeat_interval_s=600)
    _, off = build(ManagerSettings(**settings, pod_state_annotation=False), kube)
    assert off.pod_state is None
    _, service = build(ManagerSettings(**settings), kube)
    service.state.record(report(node, ns, uid, 1, "watching", 0.25, None))
    service.start()
    try:
        deadline = time.monotonic() + 60
        while (got := state_of(plane, ns, "train-a")) is None and time.monotonic() < deadline:
            time.sleep(0.3)
    finally:
        service.stop()
    assert got is not None
    assert (got["category"], got["limitCores"], got["predictedCompletion"]) == (
        "watching", 1.0, None)
