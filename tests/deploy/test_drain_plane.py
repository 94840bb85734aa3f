"""The chart's uninstall hook (``python -m specon_manager.drain``) on the real API server, as
the hook's own ServiceAccount with exactly the Role the chart renders: it deletes the agents'
DaemonSet and returns once every agent pod is gone; an agent pod that does not go in time is
named, with exit status 1. (On real nodes, tests/nodes/test_e2e.py runs it inside
``helm uninstall`` and checks the limits afterwards.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from deploylib import docs, one, render
from planelib import Plane

pytestmark = pytest.mark.plane

REPO = Path(__file__).resolve().parents[2]


def agents_daemonset(tag: str, selector: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "specon-agent"},
            "spec": {"selector": {"matchLabels": selector}, "template": {
                "metadata": {"labels": selector},
                "spec": {"nodeSelector": {"specon-test": tag},
                         "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "agent", "image": "agent:local"}]}}}}


def run_drain(kubeconfig: Path, ns: str, selector: str,
              timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specon_manager.drain", "--kubeconfig", str(kubeconfig),
         "--namespace", ns, "--daemonset", "specon-agent", "--selector", selector,
         "--timeout-s", str(timeout)], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_the_hook_deletes_the_agents_and_waits_until_they_are_gone(
    plane: Plane, plane_namespace: str, plane_bin: Path, tmp_path: Path,
) -> None:
    ns = plane_namespace
    tag = f"dr{uuid.uuid4().hex[:6]}"
    plane.add_nodes(2, prefix=tag, labels={"specon-test": tag})
    objs = docs(render(plane_bin, tmp_path / "helm", namespace=ns))
    rules = one(objs, "Role", "specon-agent-drain")["rules"]
    job = one(objs, "Job", "specon-agent-drain")
    cmd = job["spec"]["template"]["spec"]["containers"][0]["command"]
    selector = cmd[cmd.index("--selector") + 1]
    labels = dict(kv.split("=") for kv in selector.split(","))
    kubeconfig = plane.service_account_kubeconfig(ns, "specon-agent-drain", rules=rules)

    def agent_pods() -> list[dict[str, Any]]:
        out = plane.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json")
        items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
        return items

    def two_running() -> bool:
        return len([p for p in agent_pods() if p["status"].get("phase") == "Running"]) == 2

    # 1. every agent goes: exit 0, no pod and no DaemonSet left
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(agents_daemonset(tag, labels)))
    deadline = time.monotonic() + 60
    while not two_running():
        assert time.monotonic() < deadline, "agent pods not running"
        time.sleep(0.3)
    res = run_drain(kubeconfig, ns, selector, 60)
    assert res.returncode == 0, res.stderr
    assert agent_pods() == []
    gone = plane.kubectl("get", "daemonset", "-n", ns, "specon-agent", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    # a second run (helm retried) finds nothing to do
    assert run_drain(kubeconfig, ns, selector, 5).returncode == 0

    # 2. an agent pod that stays terminating (its kubelet gone) is named at the deadline
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(agents_daemonset(tag, labels)))
    deadline = time.monotonic() + 60
    while not two_running():
        assert time.monotonic() < deadline, "agent pods not running"
        time.sleep(0.3)
    stuck = agent_pods()[0]["metadata"]["name"]
    plane.kubectl("annotate", "-n", ns, f"pod/{stuck}", "specon.test/kubelet-gone=true")
    res = run_drain(kubeconfig, ns, selector, 3)
    assert res.returncode == 1
    assert stuck in res.stderr and "--no-hooks" in res.stderr, res.stderr
    plane.kubectl("annotate", "-n", ns, f"pod/{stuck}", "specon.test/kubelet-gone-")


def test_the_stop_hook_deletes_the_manager_and_waits_until_it_has_exited(
    plane: Plane, plane_namespace: str, plane_bin: Path, tmp_path: Path,
) -> None:
    """The manager's uninstall hook, as its own account with the Role the chart renders (what
    the manager does on SIGTERM: tests/manager/test_migration_handover_plane.py)."""
    ns = plane_namespace
    tag = f"ds{uuid.uuid4().hex[:6]}"
    plane.add_nodes(1, prefix=tag, labels={"specon-test": tag})
    objs = docs(render(plane_bin, tmp_path / "helm", namespace=ns))
    rules = one(objs, "Role", "specon-manager-stop")["rules"]
    cmd = one(objs, "Job", "specon-manager-stop")["spec"]["template"]["spec"]["containers"][0][
        "command"]
    selector = cmd[cmd.index("--selector") + 1]
    labels = dict(kv.split("=") for kv in selector.split(","))
    kubeconfig = plane.service_account_kubeconfig(ns, "specon-manager-stop", rules=rules)
    pod = agents_daemonset(tag, labels)["spec"]["template"]
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "specon-manager"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": pod}}))

    def pods() -> list[dict[str, Any]]:
        out = plane.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json")
        items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
        return items

    deadline = time.monotonic() + 60
    while not [p for p in pods() if p["status"].get("phase") == "Running"]:
        assert time.monotonic() < deadline, "manager pod not running"
        time.sleep(0.3)
    res = subprocess.run(
        [sys.executable, "-m", "specon_manager.drain", "--kubeconfig", str(kubeconfig),
         "--namespace", ns, "--deployment", "specon-manager", "--selector", selector,
         "--timeout-s", "60"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    assert pods() == []
    gone = plane.kubectl("get", "deployment", "-n", ns, "specon-manager", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
