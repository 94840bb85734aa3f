"""Cluster-mode discovery against the real control plane: the pods bound to this node (field
selector on spec.nodeName) that opt in, with their container IDs from pod status, arrive and
depart as the watch reports them; others' pods and pods that do not opt in are ignored.

KWOK runs no containers, so the test writes a container ID into the pod's status itself (what
a kubelet would report); everything else is the real API server's list and watch."""

from __future__ import annotations

import contextlib
import queue
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from planelib import Plane

from specon_agent.discovery import (
    Arrived,
    Departed,
    Ending,
    Event,
    KubeDiscovery,
    Resync,
    pod_targets,
)

pytestmark = pytest.mark.plane
HOLD = "example.invalid/hold"  # a finalizer nothing removes but the test


def pod(name: str, node: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [
                {"name": "train", "image": "example.invalid/train:1"}]}}


def next_event(q: queue.Queue[Event], timeout: float = 60) -> Event:
    return q.get(timeout=timeout)


def give_container_id(core: client.CoreV1Api, ns: str, name: str, cid: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        p = core.read_namespaced_pod(name, ns)
        statuses = p.status.container_statuses or []
        if p.status.phase == "Running" and statuses and statuses[0].state.running:
            break
        assert time.monotonic() < deadline, "pod never ran"
        time.sleep(0.25)
    body = {"status": {"containerStatuses": [{
        "name": "train", "image": "example.invalid/train:1", "imageID": "", "ready": True,
        "restartCount": 0, "started": True, "containerID": f"containerd://{cid}",
        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}}
    core.patch_namespaced_pod_status(name, ns, body)


def test_pods_of_this_node_arrive_and_depart_through_the_watch(
    plane: Plane, plane_namespace: str, tmp_path: Path
) -> None:
    here, other = plane.add_nodes(2, prefix=f"agent-{secrets.token_hex(2)}")
    core = client.CoreV1Api(plane.api_client())
    q: queue.Queue[Event] = queue.Queue()
    discovery = KubeDiscovery(core, here, "specon.io/training", tmp_path)
    discovery.start(q)
    try:
        first = next_event(q)
        assert isinstance(first, Resync) and first.targets == ()
        ns = plane_namespace
        core.create_namespaced_pod(ns, pod("job", here, {"specon.io/training": "true"}))
        core.create_namespaced_pod(ns, pod("not-opted-in", here))
        core.create_namespaced_pod(ns, pod("elsewhere", other, {"specon.io/training": "true"}))
        cid = secrets.token_hex(32)
        give_container_id(core, ns, "job", cid)
        give_container_id(core, ns, "not-opted-in", secrets.token_hex(32))
        give_container_id(core, ns, "elsewhere", secrets.token_hex(32))
        ev = next_event(q)
        assert isinstance(ev, Arrived), ev
        uid = core.read_namespaced_pod("job", ns).metadata.uid
        assert ev.target.cid == cid
        assert (ev.target.namespace, ev.target.pod, ev.target.container, ev.target.uid) == (
            ns, "job", "train", uid)
        assert ev.target.log_path == tmp_path / f"{ns}_job_{uid}" / "train" / "0.log"
        assert ev.target.log_kind == "cri"
        assert ev.target.kind == "example.invalid/train:1"  # no specon.io/kind: the image
        # Deleted with a finalizer holding it: first it is ending (still followed), then gone.
        core.patch_namespaced_pod("job", ns, {"metadata": {"finalizers": [HOLD]}})
        core.delete_namespaced_pod("job", ns, grace_period_seconds=0)
        assert next_event(q) == Ending(cid)
        with contextlib.suppress(client.ApiException):  # KWOK may have let it go already
            core.patch_namespaced_pod("job", ns, {"metadata": {"finalizers": None}})
        ev = next_event(q)
        assert ev == Departed(cid)
        time.sleep(2)
        assert q.empty(), q.get_nowait()  # nothing about the others
    finally:
        discovery.stop()


def test_pod_targets_opt_in_rules() -> None:
    running = {"metadata": {"namespace": "ns", "name": "p", "uid": "u", "labels": {},
                            "annotations": {}},
               "spec": {"containers": [{"name": "c"}]},
               "status": {"phase": "Running", "containerStatuses": [
                   {"name": "c", "containerID": "docker://" + "a" * 64, "restartCount": 2,
                    "state": {"running": {}}}]}}
    root = Path("/var/log/pods")
    assert pod_targets(running, "specon.io/training", root, None) == []
    by_label = {**running, "metadata": {**running["metadata"],
                                        "labels": {"specon.io/training": "true"}}}
    [t] = pod_targets(by_label, "specon.io/training", root, None)
    assert t.cid == "a" * 64 and t.log_path == root / "ns_p_u" / "c" / "2.log"
    by_annotation = {**running, "metadata": {**running["metadata"], "annotations": {
        "specon.io/training": "true", "specon.io/progress-file": "jobs/p/progress.jsonl",
        "specon.io/loss-regex": r"L=(?P<loss>\S+)"}}}
    [t] = pod_targets(by_annotation, "specon.io/training", root, Path("/shared"))
    assert t.progress_path == Path("/shared/ns/jobs/p/progress.jsonl")  # its namespace's folder
    assert t.loss_regex == r"L=(?P<loss>\S+)"
    by_scheduler = {**running, "spec": {**running["spec"], "schedulerName": "specon"}}
    assert len(pod_targets(by_scheduler, "specon.io/training", root, None)) == 1
    chart = {**running, "spec": {**running["spec"], "schedulerName": "specon-scheduler"}}
    assert pod_targets(chart, "specon.io/training", root, None) == []
    assert len(pod_targets(chart, "specon.io/training", root, None, "specon-scheduler")) == 1
    assert pod_targets(by_scheduler, "specon.io/training", root, None, "specon-scheduler") == []
    assert pod_targets(by_scheduler, "specon.io/training", root, None, "") == []
    assert t.kind is None  # its container's spec names no image
    imaged = {**by_label, "spec": {"containers": [{"name": "c", "image": "reg.example/t:2"}]}}
    assert pod_targets(imaged, "specon.io/training", root, None)[0].kind == "reg.example/t:2"
    for kind, want in (("sweep-7", "sweep-7"), ("not a kind", "reg.example/t:2")):
        labelled = {**imaged, "metadata": {**imaged["metadata"], "labels": {
            "specon.io/training": "true", "specon.io/kind": kind}}}
        assert pod_targets(labelled, "specon.io/training", root, None)[0].kind == want
    waiting = {**by_label, "status": {"phase": "Running", "containerStatuses": [
        {"name": "c", "containerID": "docker://" + "a" * 64, "state": {"waiting": {}}}]}}
    assert pod_targets(waiting, "specon.io/training", root, None) == []
