"""The resize actuator asks for its bearer token before each request, so a renewed token is
used without a restart: here a kubeconfig ``exec`` plugin (the ``kubernetes`` package re-runs
it when its token is within five minutes of expiry), against the real API server. In-cluster,
the same hook reads the projected token file again once a minute."""

from __future__ import annotations

import json
from pathlib import Path

import execplugin
import pytest
from planelib import Plane
from planemanager import wait_for

from specon_agent.__main__ import _api_endpoint
from specon_agent.actuators.base import CpuLimit
from specon_agent.actuators.resize import ResizeActuator
from specon_agent.settings import AgentSettings

pytestmark = pytest.mark.plane
READ_PODS = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]


def _refused(plane: Plane, token: str) -> bool:
    out = plane.kubectl("get", "--raw", "/api", f"--token={token}", "--kubeconfig=/dev/null",
                        f"--server={plane.server}", f"--certificate-authority={plane.ca_file}",
                        check=False)
    return out.returncode != 0 and "Unauthorized" in out.stderr


def test_resize_actuator_uses_the_renewed_token_without_a_restart(
    plane: Plane, plane_namespace: str, tmp_path: Path
) -> None:
    ns = plane_namespace
    for name in ("old", "new"):
        plane.service_account_kubeconfig(ns, name, rules=READ_PODS)
    old, new = plane.request_token(ns, "old"), plane.request_token(ns, "new")
    node = plane.add_nodes(1, prefix=f"rt{ns[-6:]}")[0]
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
            "nodeName": node, "containers": [{"name": "main", "image": "x", "resources": {
                "limits": {"cpu": "2"}}}]}}))
    folder = tmp_path / "kube"
    config = execplugin.write(folder, plane.server, plane.ca_file, old, life_s=60)
    settings = AgentSettings(mode="cluster", manager_url="http://127.0.0.1:9",
                             actuator="resize", kubeconfig=config, metrics_port=0,
                             node_name=node, events=False)
    act = ResizeActuator(node_cpus=4, **_api_endpoint(settings))
    act.register("containerd://t", ns, "p", "main")
    assert act.read("containerd://t") == CpuLimit(200_000)
    (folder / "token").write_text(new)
    plane.kubectl("delete", "serviceaccount", "-n", ns, "old")
    wait_for("the old token refused", lambda: _refused(plane, old))
    assert act.read("containerd://t") == CpuLimit(200_000)  # with the new token
    act.close()
