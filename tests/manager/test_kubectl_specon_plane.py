"""``kubectl specon`` (specon/kubectl_plugin.py) against the real API server: training pods on a
KWOK node, the Events the agent (its real LimitEvents poster) and the manager (its real event
bodies) post about them, the real manager process answering through the API server's service
proxy, and the plugin found by the installed kubectl on PATH and run as a process
(docs/user-guide.md, "kubectl specon"). Its pure parts: tests/kubectl/."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from managerlib import heartbeat, token
from planelib import Plane
from planemanager import ManagerProcess
from tlslib import issue, make_ca

from specon_agent.events import LimitEvents, LimitNote, kube_sender
from specon_manager.kube import event_body

pytestmark = pytest.mark.plane

REPO = Path(__file__).resolve().parents[2]


def pod(name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x",
                     "resources": {"limits": {"cpu": "2"}}}]}}


def uids_when_running(plane: Plane, ns: str, want: set[str]) -> dict[str, str]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        items = json.loads(plane.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
        up = {p["metadata"]["name"]: p["metadata"]["uid"] for p in items
              if p["status"].get("phase") == "Running"}
        if want <= up.keys():
            return up
        time.sleep(0.3)
    raise AssertionError(f"pods {sorted(want)} never ran")


@pytest.fixture
def plugin_env(plane: Plane, tmp_path: Path) -> dict[str, str]:
    """PATH with an executable ``kubectl-specon`` (what the console script installs), and the
    plane's kubeconfig as the user's."""
    shim = tmp_path / "bin" / "kubectl-specon"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m specon.kubectl_plugin "$@"\n')
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}",
            "KUBECONFIG": str(plane.kubeconfig), "PYTHONPATH": str(REPO)}


def specon(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "specon", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_get_describe_and_nodes_show_what_specon_did(
    plane: Plane, plane_namespace: str, plugin_env: dict[str, str]
) -> None:
    ns = plane_namespace
    node = plane.add_nodes(1, prefix=f"kp{ns[-6:]}")[0]
    training = {"specon.io/training": "true", "specon.io/migratable": "true"}
    for name, labels in (("train-a", training), ("train-b", training), ("plain", {})):
        plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(pod(name, node, labels)))
    uid = uids_when_running(plane, ns, {"train-a", "train-b", "plain"})

    # train-b replaced train-old (gone now): the manager's Events, as reserve.py and end.py
    # word them, about the source pod and the replacement
    old = {"apiVersion": "v1", "metadata": {"name": "train-old", "namespace": ns,
                                            "uid": "0f0f0f0f-old"}}
    new = {"apiVersion": "v1", "metadata": {"name": "train-b", "namespace": ns,
                                            "uid": uid["train-b"]}}
    for obj, reason, note in (
            (old, "MigrationStarted", f"migration 3a4b5c (converged): other -> {node}; "
                                      "target reserved"),
            (old, "MigrationEvicted", f"migration 3a4b5c: evicted after a verified checkpoint; "
                                      f"the replacement goes to {node}"),
            (new, "MigrationCompleted", f"migration 3a4b5c: replacement train-b placed on {node}")):
        body = event_body(obj, reason, note, action="Migrate")
        plane.kubectl("create", "-f", "-", input=json.dumps(body))
    # the agent's limit changes, through its real poster (no aggregation window)
    events = LimitEvents(kube_sender(plane.api_client()), node, window_s=0)
    events.offer(LimitNote(ns, "train-a", uid["train-a"], "main", 2.0, None, category="PC",
                           why="set by the node share rule progress"))
    events.offer(LimitNote(ns, "train-b", uid["train-b"], "main", 2.0, 1.5, category="PC"))
    events.offer(LimitNote(ns, "train-b", uid["train-b"], "main", 1.5, 0.5, category="WC",
                           why="set by FlowCon (list 2)"))
    events.close()

    got = specon(plugin_env, "get", "-n", ns)
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert lines[0].split() == ["NAME", "NODE", "STATUS", "CATEGORY", "LIMIT", "SINCE", "ETA",
                                "MOVES"]
    rows = {r.split()[0]: r.split() for r in lines[1:]}
    assert rows.keys() == {"train-a", "train-b"}  # "plain" is no training pod
    assert rows["train-a"][1:5] + rows["train-a"][6:] == [node, "Running", "PC", "unlimited",
                                                         "-", "0"]
    assert rows["train-b"][1:5] + rows["train-b"][6:] == [node, "Running", "WC", "0.5", "-", "1"]

    got = specon(plugin_env, "get", "-A", "-o", "json")
    assert got.returncode == 0, got.stderr
    mine = {r["name"]: r for r in json.loads(got.stdout) if r["namespace"] == ns}
    assert mine["train-b"]["limit_cores"] == 0.5 and mine["train-b"]["replaced"] == ["train-old"]
    assert mine["train-a"]["eta_s"] is None and mine["train-a"]["migratable"]
    assert mine["train-b"]["limit_from"] == "event"
    # no manager in this plane: the ETA is blank, and stderr says why
    assert "ETA left blank: the manager (specon-system/https:specon-manager:https)" in got.stderr

    got = specon(plugin_env, "describe", "train-b", "-n", ns, "-o", "json")
    assert got.returncode == 0, got.stderr
    told = json.loads(got.stdout)
    assert told["replaced"] == ["train-old"]
    assert [(h["pod"], h["from"], h["reason"]) for h in told["history"]] == [
        ("train-old", "manager", "MigrationStarted"),
        ("train-old", "manager", "MigrationEvicted"),
        ("train-b", "manager", "MigrationCompleted"),
        ("train-b", "agent", "CPULimitLowered"),
        ("train-b", "agent", "CPULimitLowered")]
    assert told["history"][-1]["note"].endswith("job WC; set by FlowCon (list 2)")
    assert told["labels"] == {"specon.io/training": "true", "specon.io/migratable": "true"}
    text = specon(plugin_env, "describe", "train-b", "-n", ns).stdout
    assert "Replaced:    train-old" in text and f"agent/{node}" in text

    got = specon(plugin_env, "nodes", "-o", "json")
    assert got.returncode == 0, got.stderr
    (row,) = [r for r in json.loads(got.stdout) if r["name"] == node]
    assert row == {"name": node, "ready": True, "cpus": 4.0, "speed": None, "jobs": 2,
                   "PC": 1, "WC": 1, "CC": 0, "limits_cores": 0.5, "unlimited": 1,
                   "unknown": 0}
    # the node's per-core speed, as its administrator labelled it (docs/manager.md)
    plane.kubectl("label", "node", node, "specon.io/cpu-speed=1.5")
    text = specon(plugin_env, "nodes").stdout
    assert text.splitlines()[0].split()[:4] == ["NAME", "READY", "CPUS", "SPEED"]
    assert [line.split()[3] for line in text.splitlines() if line.startswith(node)] == ["1.5"]


def test_bad_input_is_2_and_a_failure_is_1(
    plane: Plane, plane_namespace: str, plugin_env: dict[str, str]
) -> None:
    assert specon(plugin_env, "describe").returncode == 2  # no pod named
    assert specon(plugin_env, "get", "-n", "x", "-A").returncode == 2
    got = specon(plugin_env, "describe", "no-such-pod", "-n", plane_namespace)
    assert got.returncode == 1 and "no-such-pod" in got.stderr


def host_address() -> str | None:
    """An address of this host that is not loopback (the API server proxies to no loopback
    endpoint), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("198.51.100.1", 9))  # no packet is sent: this only picks a route
        except OSError:
            return None
        ip = str(s.getsockname()[0])
    return None if ip.startswith("127.") else ip


def test_get_shows_the_managers_live_view_through_the_service_proxy(
    plane: Plane, plane_namespace: str, plugin_env: dict[str, str], tmp_path: Path
) -> None:
    ip = host_address()
    if ip is None:
        pytest.skip("this host has no address but loopback: the API server proxies to none")
    ns = plane_namespace
    node = plane.add_nodes(1, prefix=f"km{ns[-6:]}")[0]
    training = {"specon.io/training": "true"}
    for name in ("train-c", "train-d"):
        plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(pod(name, node, training)))
    uid = uids_when_running(plane, ns, {"train-c", "train-d"})
    ca = make_ca(tmp_path / "tls", "ca")  # HTTPS, as the chart serves it
    serving = issue(tmp_path / "tls", ca, "manager", "specon-manager", ("IP:127.0.0.1",))
    manager = ManagerProcess(plane, tmp_path, {token("node-7"): node}, ca_file=ca.cert,
                             tls_cert_file=serving.cert, tls_key_file=serving.key,
                             host="0.0.0.0", migration=False)
    manager.start()
    try:
        # what the node's agent reports (its JobReport fields)
        r = httpx.post(f"{manager.url}/v1/heartbeat", verify=manager.verify, timeout=10,
                       headers={"Authorization": f"Bearer {token('node-7')}"},
                       json=heartbeat(node, cpus=4, jobs=[
            {"namespace": ns, "pod": "train-c", "uid": uid["train-c"], "category": "WC",
             "limit": 0.25, "predicted_finish_s": 1800.0, "step": 100, "loss": 1.0,
             "work_done_s": 50.0, "work_s": 50.0},
            {"namespace": ns, "pod": "train-d", "uid": uid["train-d"], "category": "PC",
             "limit": 0.5, "step": 200, "total_steps": 400, "loss": 0.5,
             "work_done_s": 100.0, "work_s": 100.0}]))  # no prediction yet
        assert r.status_code == 200, r.text
        # the manager as the chart runs it: a pod (this host's address as its IP, which the
        # API server checks before it proxies) behind a Service
        plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mgr"},
            "spec": {"schedulerName": "nobody", "containers": [{"name": "m", "image": "x"}]}}))
        plane.kubectl("patch", "pod", "mgr", "-n", ns, "--subresource=status", "--type=merge",
                      "-p", json.dumps({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}}))
        plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "mgr"},
                 "spec": {"ports": [{"name": "https", "port": 443,
                                     "targetPort": manager.port}]}},
                {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "mgr"},
                 "subsets": [{"addresses": [{"ip": ip, "targetRef": {
                     "kind": "Pod", "name": "mgr", "namespace": ns}}],
                              "ports": [{"name": "https", "port": manager.port}]}]}]}))
        got = specon(plugin_env, "get", "-n", ns, "--manager", f"{ns}/https:mgr:https",
                     "-o", "json")
        assert got.returncode == 0, got.stderr
        assert got.stderr == ""
        rows = {r["name"]: r for r in json.loads(got.stdout)}
        assert rows["train-c"]["category"] == "WC" and rows["train-c"]["limit_cores"] == 1.0
        assert rows["train-c"]["limit_from"] == "manager"
        assert 1700 < rows["train-c"]["eta_s"] <= 1800
        assert rows["train-d"]["category"] == "PC" and rows["train-d"]["eta_s"] is None
        table = specon(plugin_env, "get", "-n", ns, "--manager", f"{ns}/https:mgr:https").stdout
        row = next(r.split() for r in table.splitlines() if r.startswith("train-c "))
        assert row[3:5] == ["WC", "1"] and row[6] in ("29m", "30m")
        # `specon whatif` reaches the manager the same way, with the user's kubeconfig
        got = subprocess.run(
            [sys.executable, "-m", "specon", "whatif", "--namespace", ns, "--service",
             "https:mgr:https", "--seeds", "1", "--json"], env=plugin_env, capture_output=True,
            text=True, timeout=300, check=False)
        assert got.returncode == 0, got.stderr
        told = json.loads(got.stdout)
        assert told["jobs"] == 2 and set(told["policies"]) == {"default", "progress"}
        assert any("1 job(s) declare no total steps" in n for n in told["notes"])
        got = subprocess.run(
            [sys.executable, "-m", "specon", "whatif", "--namespace", ns, "--service",
             "https:no-such-service:https"], env=plugin_env, capture_output=True, text=True,
            timeout=300, check=False)
        assert got.returncode == 1 and "through the API server" in got.stderr
    finally:
        manager.terminate()
        manager.wait_exit()
