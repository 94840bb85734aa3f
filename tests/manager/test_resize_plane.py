"""The in-place resize actuator against the real API server (KWOK reports the applied
resources, as a resize-capable kubelet does)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import yaml
from planelib import Plane
from planemanager import wait_for

from specon_agent.actuators.base import ActuatorError, CpuLimit
from specon_agent.actuators.resize import ResizeActuator

pytestmark = pytest.mark.plane


def actuator(plane: Plane) -> ResizeActuator:
    cfg = yaml.safe_load(plane.kubeconfig.read_text())
    token = cfg["users"][0]["user"]["token"]
    return ResizeActuator(node_cpus=4, server=plane.server, token=token,
                          ca_file=str(plane.ca_file))


def pod(name: str, node: str, limit: str = "2", request: str = "500m") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "nodeName": node, "containers": [{"name": "main", "image": "x", "resources": {
            "requests": {"cpu": request}, "limits": {"cpu": limit}}}]}}


def running(plane: Plane, ns: str, name: str) -> bool:
    out = plane.kubectl("get", "pod", "-n", ns, name, "-o", "json", check=False)
    return out.returncode == 0 and json.loads(out.stdout)["status"].get("phase") == "Running"


def test_resize_sets_the_limit_through_the_api_and_the_status_follows(
    plane: Plane, plane_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    ns = plane_namespace
    node = plane.add_nodes(1, prefix=f"rs{ns[-6:]}")[0]
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(pod("r1", node)))
    wait_for("r1 running", lambda: running(plane, ns, "r1"))
    act = actuator(plane)
    act.register("containerd://abc", ns, "r1", "main")
    assert act.read("containerd://abc") == CpuLimit(200_000)  # 2 cores
    caplog.set_level(logging.INFO)
    change = act.apply("containerd://abc", 0.25)  # a quarter of 4 CPUs: 1 core
    assert change is not None and change.after == CpuLimit(100_000)
    spec = json.loads(plane.kubectl("get", "pod", "-n", ns, "r1", "-o", "json").stdout)
    assert spec["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "1"
    assert spec["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "500m"
    wait_for("the resize applied", lambda: act.applied("containerd://abc") == CpuLimit(100_000))
    assert act.apply("containerd://abc", 0.25) is None  # no write when nothing changes
    # below the request: the request is lowered with it (else validation refuses it)
    act.apply("containerd://abc", 0.05)
    spec = json.loads(plane.kubectl("get", "pod", "-n", ns, "r1", "-o", "json").stdout)
    assert spec["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "200m"
    assert "resize cpu limit" in caplog.text
    # a vanished pod is "gone", not a failure
    plane.kubectl("delete", "pod", "-n", ns, "r1", "--wait=true")
    with pytest.raises(ActuatorError) as gone:
        act.apply("containerd://abc", 0.5)
    assert gone.value.reason == "gone"
