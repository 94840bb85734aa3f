"""``kubectl specon`` against the real API server: training pods on a KWOK node, the Events the
agent (its real LimitEvents poster) and the manager (its real event bodies) post about them,
and the plugin found by the installed kubectl on PATH and run as a process
(docs/user-guide.md, "kubectl specon")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from planelib import Plane

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
    assert mine["train-a"]["eta"] is None and mine["train-a"]["migratable"]

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
    assert row == {"name": node, "ready": True, "cpus": 4.0, "jobs": 2, "PC": 1, "WC": 1,
                   "CC": 0, "limits_cores": 0.5, "unlimited": 1, "unknown": 0}


def test_bad_input_is_2_and_a_failure_is_1(
    plane: Plane, plane_namespace: str, plugin_env: dict[str, str]
) -> None:
    assert specon(plugin_env, "describe").returncode == 2  # no pod named
    assert specon(plugin_env, "get", "-n", "x", "-A").returncode == 2
    got = specon(plugin_env, "describe", "no-such-pod", "-n", plane_namespace)
    assert got.returncode == 1 and "no-such-pod" in got.stderr
