"""Smoke tests proving the test plane is real: KWOK nodes, scheduling by kube-scheduler, the Job
controller, in-place resize, RBAC refusals and a scheduler extender that kube-scheduler calls."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from loopback import JsonHandler
from planelib import KWOK_NODE_ANNOTATION, Plane, dump_json, free_port

pytestmark = pytest.mark.plane

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60) -> T:
    """Poll probe until it returns something truthy; fail saying what never happened."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="module")
def nodes(plane: Plane) -> list[str]:
    return plane.add_nodes(2, cpu="4", memory="8Gi", prefix="smoke")


@pytest.fixture
def core(plane: Plane) -> client.CoreV1Api:
    return client.CoreV1Api(plane.api_client())


def pod_manifest(name: str, cpu: str = "500m", limit_cpu: str = "1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "containers": [{
                "name": "train", "image": "example.invalid/train:1",
                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"},
                              "limits": {"cpu": limit_cpu, "memory": "64Mi"}},
            }],
            **spec,
        },
    }


def running(core: client.CoreV1Api, ns: str, name: str) -> Callable[[], Any]:
    def probe() -> Any:
        pod = core.read_namespaced_pod(name, ns)
        return pod if pod.status.phase == "Running" else None
    return probe


def test_kubectl_get_nodes_lists_the_kwok_nodes(plane: Plane, nodes: list[str]) -> None:
    out = json.loads(plane.kubectl("get", "nodes", "-o", "json").stdout)
    listed = {n["metadata"]["name"]: n for n in out["items"]}
    assert set(nodes) <= set(listed)
    for name in nodes:
        node = listed[name]
        assert node["metadata"]["annotations"][KWOK_NODE_ANNOTATION] == "fake"
        assert node["status"]["capacity"]["cpu"] == "4"
        assert node["status"]["allocatable"]["memory"] == "8Gi"
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True"
    # kubectl's table view too, as a user would see it
    table = plane.kubectl("get", "nodes").stdout
    assert all(name in table for name in nodes)


def test_applied_pod_is_scheduled_by_kube_scheduler_and_runs(
    plane: Plane, nodes: list[str], plane_namespace: str, core: client.CoreV1Api
) -> None:
    ns = plane_namespace
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(pod_manifest("p1")))
    pod = wait_for("pod p1 Running", running(core, ns, "p1"))
    node = core.read_node(pod.spec.node_name)
    assert node.metadata.annotations.get(KWOK_NODE_ANNOTATION) == "fake"
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=p1").items
    scheduled = [e for e in events if e.reason == "Scheduled"]
    assert scheduled and scheduled[0].reporting_component == "default-scheduler"
    # KWOK reports the container's resources, as a resize-capable kubelet does
    status = pod.status.container_statuses[0]
    assert status.state.running is not None
    assert status.resources.limits["cpu"] == "1"


def test_unschedulable_pod_stays_pending(
    plane: Plane, nodes: list[str], plane_namespace: str, core: client.CoreV1Api
) -> None:
    # Proves the scheduler really filters by capacity: no node has 64 CPUs.
    ns = plane_namespace
    plane.kubectl("apply", "-n", ns, "-f", "-",
                  input=json.dumps(pod_manifest("huge", cpu="64", limit_cpu="64")))

    def unschedulable() -> bool:
        pod = core.read_namespaced_pod("huge", ns)
        conds = {c.type: c for c in (pod.status.conditions or [])}
        cond = conds.get("PodScheduled")
        return bool(cond and cond.status == "False" and cond.reason == "Unschedulable")

    wait_for("pod huge marked Unschedulable", unschedulable)
    assert core.read_namespaced_pod("huge", ns).spec.node_name is None


def test_deleted_job_pod_is_recreated_by_the_job_controller(
    plane: Plane, nodes: list[str], plane_namespace: str, core: client.CoreV1Api
) -> None:
    ns = plane_namespace
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
        "spec": {"backoffLimit": 4, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": pod_manifest("x")["spec"]["containers"],
        }}},
    }
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(job))

    def job_pod_running() -> Any:
        pods = core.list_namespaced_pod(ns, label_selector="job-name=train").items
        live = [p for p in pods
                if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
        return live[0] if live else None

    first = wait_for("the Job's pod Running", job_pod_running)
    plane.kubectl("delete", "pod", "-n", ns, first.metadata.name, "--wait=true")

    def replacement() -> Any:
        pod = job_pod_running()
        return pod if pod is not None and pod.metadata.uid != first.metadata.uid else None

    second = wait_for("a replacement pod from the Job controller", replacement, timeout=90)
    assert second.metadata.owner_references[0].kind == "Job"

    # completing it on demand completes the Job
    plane.complete_pod(ns, second.metadata.name, "Succeeded")
    batch = client.BatchV1Api(plane.api_client())

    def complete() -> bool:
        conds = batch.read_namespaced_job("train", ns).status.conditions or []
        return any(c.type == "Complete" and c.status == "True" for c in conds)

    wait_for("Job Complete", complete, timeout=60)


def test_resize_patch_of_running_pod_cpu_is_accepted_and_visible(
    plane: Plane, nodes: list[str], plane_namespace: str, core: client.CoreV1Api
) -> None:
    ns = plane_namespace
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(pod_manifest("r1")))
    wait_for("pod r1 Running", running(core, ns, "r1"))
    patch = {"spec": {"containers": [{"name": "train", "resources": {
        "requests": {"cpu": "700m"}, "limits": {"cpu": "1500m"}}}]}}
    plane.kubectl("patch", "pod", "r1", "-n", ns, "--subresource", "resize", "--type",
                  "strategic", "-p", dump_json(patch))
    pod = core.read_namespaced_pod("r1", ns)
    assert pod.spec.containers[0].resources.limits["cpu"] == "1500m"
    assert pod.spec.containers[0].resources.requests["cpu"] == "700m"

    def applied() -> bool:
        st = core.read_namespaced_pod("r1", ns).status.container_statuses[0]
        return bool(st.resources and st.resources.limits.get("cpu") == "1500m")

    wait_for("the resize reported in status (KWOK's pod-resized stage)", applied)
    # A resize that is not allowed is refused by the API server's validation (memory requests
    # and limits of a Guaranteed-less pod may change, but a new resource may not be added).
    bad = {"spec": {"containers": [{"name": "train", "resources": {
        "limits": {"ephemeral-storage": "1Gi"}}}]}}
    res = plane.kubectl("patch", "pod", "r1", "-n", ns, "--subresource", "resize", "--type",
                        "strategic", "-p", dump_json(bad), check=False)
    assert res.returncode != 0
    assert "only cpu and memory resources are mutable" in res.stderr


def test_request_without_rbac_permission_is_refused(
    plane: Plane, plane_namespace: str
) -> None:
    ns = plane_namespace
    kubeconfig = plane.service_account_kubeconfig(
        ns, "reader", rules=[{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}])
    core = client.CoreV1Api(plane.api_client(kubeconfig))
    assert core.list_namespaced_pod(ns).items == []  # allowed by the Role
    with pytest.raises(ApiException) as denied:
        core.list_namespaced_secret(ns)
    assert denied.value.status == 403
    with pytest.raises(ApiException) as elsewhere:
        core.list_namespaced_pod("default")
    assert elsewhere.value.status == 403
    res = plane.kubectl("create", "configmap", "c", "-n", ns, kubeconfig=kubeconfig, check=False)
    assert res.returncode != 0 and "forbidden" in res.stderr.lower()
    assert "reader" in res.stderr  # refused for this ServiceAccount, not for a bad token


class _Extender(JsonHandler):
    """A scheduler extender that keeps only the node named by the server's `only` attribute and
    records every request body (real HTTP: kube-scheduler is the client)."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server: Any = self.server
        server.calls.append((self.path, body))
        names = body.get("NodeNames") or [n["metadata"]["name"] for n in body["Nodes"]["items"]]
        keep = [n for n in names if n == server.only]
        reply = {"NodeNames": keep,
                 "FailedNodes": {n: "not chosen by the test extender"
                                 for n in names if n not in keep},
                 "Error": ""}
        self.reply(200, json.dumps(reply).encode())


@pytest.fixture
def extender() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", free_port()), _Extender)
    server.calls = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("scheduler", ["specon-test", "default-scheduler"])
def test_scheduler_with_extender_places_pods_where_the_extender_says(
    plane: Plane, nodes: list[str], plane_namespace: str, core: client.CoreV1Api, extender: Any,
    scheduler: str,
) -> None:
    # "specon-test" runs beside the default scheduler (pods pick it by schedulerName);
    # "default-scheduler" replaces the plane's own scheduler, then the plain one is put back.
    ns = plane_namespace
    extender.only = nodes[1]
    port = extender.server_address[1]
    plane.run_scheduler(scheduler, extenders=[{
        "urlPrefix": f"http://127.0.0.1:{port}", "filterVerb": "filter",
        "nodeCacheCapable": True, "weight": 1,
    }])
    try:
        for i in range(2):
            plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
                pod_manifest(f"e{i}", schedulerName=scheduler)))
        for i in range(2):
            pod = wait_for(f"pod e{i} Running", running(core, ns, f"e{i}"))
            assert pod.spec.node_name == nodes[1]
    finally:
        if scheduler == "default-scheduler":
            plane.reset_scheduler()
        else:
            plane.stop_scheduler(scheduler)
    paths = {path for path, _ in extender.calls}
    assert paths == {"/filter"}
    _, body = extender.calls[0]
    assert body["Pod"]["metadata"]["namespace"] == ns
    assert nodes[1] in body["NodeNames"]


#: How long the test below holds KWOK's heartbeats back: past the node lifecycle controller's
#: default 50 s grace (and past the 54-58 s KWOK's own heartbeat stage leaves between beats).
SILENT_S = 60.0


def test_a_kwok_node_stays_schedulable_through_a_gap_in_its_heartbeats(
    plane: Plane, core: client.CoreV1Api,
) -> None:
    """KWOK's default node stage renews a node's Ready heartbeat only every 54-58 s; with the
    controller manager's default 50 s grace, KWOK nodes were tainted unreachable for seconds
    at a time, and a pod the test expected on one node went to another (a plane test failure
    seen three times). The plane's grace (NODE_MONITOR_GRACE_S) outlasts the gaps: with KWOK
    stopped for longer than the default grace, its node is never tainted."""
    [node] = plane.add_nodes(1, prefix=f"hb{uuid.uuid4().hex[:6]}")
    kwok = plane.components["kwok"]
    kwok.stop()
    seen: list[str] = []
    try:
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < SILENT_S:
            taints = core.read_node(node).spec.taints or []
            seen += [f"{elapsed:.0f} s: {t.key}" for t in taints]
            time.sleep(1)
    finally:
        kwok.start()
    assert not seen, seen
    plane.delete_node(node)
