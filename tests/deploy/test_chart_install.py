"""The chart against the real control plane: every rendering is accepted by the API server
(server-side dry run), the chart installs and each object exists and runs as its own service
account, the RBAC is enough for what each component does and refuses what it does not do, and
the real manager and kube-scheduler, each acting only as the chart's service account, place the
user guide's training Job."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploylib import ACTUATORS, CHART, DEPLOY, docs, helm, pod_spec, render, set_args
from planelib import Plane, free_port, write_kubeconfig

from specon import defaults

pytestmark = pytest.mark.plane

CHART_LABEL = "specon.test/chart"
SCHEDULER_NAME = "specon-chart"
EXAMPLE = DEPLOY / "examples" / "training-job.yaml"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm")


def fresh_namespace(plane: Plane) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    plane.kubectl("create", "namespace", name)
    return name


@pytest.mark.parametrize("variant", [
    {},
    *({"agent.actuator": a} for a in ACTUATORS),
    {"scheduler.mode": "existing", "metrics.dashboards.enabled": True,
     "manager.replicas": 2, "sharedVolume.existingClaim": "shared"},
], ids=["defaults", *ACTUATORS, "existing-scheduler+dashboards+ha"])
def test_api_server_accepts_every_rendering(
        plane: Plane, plane_bin: Path, home: Path, variant: dict[str, Any]) -> None:
    ns = fresh_namespace(plane)
    try:
        text = render(plane_bin, home, variant, release=f"dry-{uuid.uuid4().hex[:6]}",
                      namespace=ns)
        assert len(docs(text)) >= 15
        res = plane.kubectl("apply", "--dry-run=server", "-f", "-", input=text)
        lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
        assert len(lines) == len(docs(text))
        assert all(ln.endswith("(server dry run)") for ln in lines), res.stdout
    finally:
        plane.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_the_committed_plain_manifests_are_accepted(plane: Plane) -> None:
    ns_docs = [d for f in sorted(DEPLOY.glob("*.yaml")) for d in docs(f.read_text())]
    assert ns_docs, "deploy/ holds no manifests"
    # They name their own namespace (specon-system); a dry run needs it to exist.
    plane.kubectl("create", "namespace", "specon-system", check=False)
    res = plane.kubectl("apply", "--dry-run=server", "-f", str(DEPLOY))
    assert res.stdout.count("(server dry run)") == len(ns_docs), res.stdout


# -- a real install --------------------------------------------------------------------------------
@dataclass
class Install:
    plane: Plane
    namespace: str
    release: str
    nodes: list[str]
    workdir: Path
    accounts: dict[str, str] = field(default_factory=dict)  # component -> ServiceAccount

    def token_for(self, component: str) -> str:
        return str(self.plane.kubectl("create", "token", "-n", self.namespace,
                                      self.accounts[component], "--duration=3600s").stdout.strip())

    def kubeconfig_as(self, component: str) -> Path:
        sa = self.accounts[component]
        token = self.token_for(component)
        return write_kubeconfig(self.workdir / f"{component}.kubeconfig", self.plane.server,
                                self.plane.ca_file, token,
                                f"system:serviceaccount:{self.namespace}:{sa}")

    def get(self, *args: str) -> Any:
        return json.loads(self.plane.kubectl("get", "-n", self.namespace, *args,
                                             "-o", "json").stdout)


@pytest.fixture(scope="module")
def installed(plane: Plane, plane_bin: Path, home: Path,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    ns = fresh_namespace(plane)
    nodes = plane.add_nodes(2, prefix="chart-install", labels={CHART_LABEL: "true"})
    release = "rel"
    only_ours = {CHART_LABEL: "true"}
    values: dict[str, Any] = {
        "agent.actuator": "resize", "scheduler.schedulerName": SCHEDULER_NAME,
        "agent.nodeSelector": only_ours, "manager.nodeSelector": only_ours,
        "scheduler.nodeSelector": only_ours,
    }
    # The storage an operator provides: an NFS volume reserved for the chart's claim (nothing
    # mounts it here; the agents' pods are only scheduled once their claim is bound).
    pv = f"{ns}-shared"
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "20Gi"}, "accessModes": ["ReadWriteMany"],
                 "nfs": {"server": "10.0.0.9", "path": "/specon"},
                 "claimRef": {"namespace": ns, "name": f"{release}-specon-shared"}}}))
    helm(plane_bin, "install", release, str(CHART), "--namespace", ns,
         "--kubeconfig", str(plane.kubeconfig), *set_args(values), home=home)
    inst = Install(plane, ns, release, nodes, tmp_path_factory.mktemp("install"),
                   {"manager": "rel-specon-manager", "agent": "rel-specon-agent",
                    "scheduler": "rel-specon-scheduler"})
    try:
        yield inst
    finally:
        helm(plane_bin, "uninstall", release, "--namespace", ns, "--kubeconfig",
             str(plane.kubeconfig), home=home, check=False)
        for node in nodes:
            plane.delete_node(node)
        plane.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        plane.kubectl("delete", "pv", pv, "--wait=false", check=False)


def wait_for(what: str, probe: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")


def test_every_object_of_the_release_exists(installed: Install, plane_bin: Path,
                                            home: Path) -> None:
    manifest = helm(plane_bin, "get", "manifest", installed.release, "--namespace",
                    installed.namespace, "--kubeconfig", str(installed.plane.kubeconfig),
                    home=home).stdout
    objs = docs(manifest)
    kinds = sorted({o["kind"] for o in objs})
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Deployment",
                     "PersistentVolumeClaim", "Role", "RoleBinding", "Secret", "Service",
                     "ServiceAccount"]
    res = installed.plane.kubectl("get", "-f", "-", "-o", "name",
                                  input=manifest)
    assert len(res.stdout.split()) == len(objs)


def test_workloads_run_as_their_own_service_accounts(installed: Install) -> None:
    ns = installed.namespace

    def pods(component: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = installed.get(
            "pods", "-l", f"app.kubernetes.io/component={component}")["items"]
        return [p for p in items if p["spec"].get("nodeName")]

    # One agent per labelled node (KWOK runs the DaemonSet's pods as a kubelet would report).
    agents = wait_for("agent pods on both nodes",
                      lambda: (lambda ps: ps if len(ps) == 2 else None)(pods("agent")))
    assert sorted(p["spec"]["nodeName"] for p in agents) == sorted(installed.nodes)
    for component in ("manager", "scheduler"):
        (pod,) = wait_for(f"{component} pod", lambda c=component: pods(c))
        assert pod["spec"]["nodeName"] in installed.nodes
        assert pod["spec"]["serviceAccountName"] == installed.accounts[component]
    assert {p["spec"]["serviceAccountName"] for p in agents} == {installed.accounts["agent"]}
    # Each binding names exactly its component's account.
    for kind, where in (("clusterrolebinding", []), ("rolebinding", ["-n", ns])):
        items = json.loads(installed.plane.kubectl(
            "get", kind, *where, "-l", f"app.kubernetes.io/instance={installed.release}",
            "-o", "json").stdout)["items"]
        for b in items:
            component = b["metadata"]["labels"]["app.kubernetes.io/component"]
            assert b["subjects"] == [{"kind": "ServiceAccount", "namespace": ns,
                                      "name": installed.accounts[component]}]
    # The tokens Secret holds a token for each node the cluster had at install.
    secret = installed.get("secret", "rel-specon-agent-tokens")
    assert set(installed.nodes) <= set(secret["data"])
    lines = base64.b64decode(secret["data"]["tokens"]).decode().splitlines()
    named = {ln.split()[1]: ln.split()[0] for ln in lines if ln and not ln.startswith("#")}
    for node in installed.nodes:
        assert named[node] == base64.b64decode(secret["data"][node]).decode()


def can_i(install: Install, component: str, *args: str) -> bool:
    kubeconfig = install.kubeconfig_as(component)
    res = install.plane.kubectl("auth", "can-i", *args, kubeconfig=kubeconfig, check=False)
    return res.stdout.strip() == "yes"


EVICT = ["create", "pods", "--subresource=eviction", "-A"]


@pytest.mark.parametrize(("component", "allowed", "refused"), [
    ("manager",
     [["list", "nodes"], ["get", "pods", "-A"], ["create", "pods", "-A"], ["patch", "pods", "-A"],
      ["delete", "pods", "-A"], EVICT, ["patch", "jobs.batch", "-A"],
      ["create", "events", "-A"]],
     [["delete", "jobs.batch", "-A"], ["list", "secrets", "-A"], ["update", "nodes"]]),
    ("agent",
     [["list", "pods", "-A"], ["watch", "pods", "-A"],
      ["patch", "pods", "--subresource=resize", "-A"]],
     [["patch", "pods", "-A"], ["list", "secrets", "-A"], EVICT]),
    ("scheduler",
     [["create", "pods", "--subresource=binding", "-A"], ["watch", "nodes"],
      ["patch", "pods", "--subresource=status", "-A"]],
     [["create", "pods", "-A"], ["list", "secrets", "-A"]]),
])
def test_rbac_allows_each_components_verbs_and_refuses_others(
        installed: Install, component: str, allowed: list[list[str]],
        refused: list[list[str]]) -> None:
    for verb in allowed:
        assert can_i(installed, component, *verb), f"{component} cannot {verb}"
    for verb in refused:
        assert not can_i(installed, component, *verb), f"{component} may {verb}"


# -- the real programs, acting as the chart's service accounts ------------------------------------
def _http(url: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def manager_as_chart(installed: Install) -> Iterator[tuple[str, dict[str, str]]]:
    """specon-manager with the chart Deployment's environment, its service account's
    kubeconfig and the chart's tokens file; yields its URL and the node tokens."""
    deploy = installed.get("deployment", "rel-specon-manager")
    container = pod_spec(deploy)["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    secret = installed.get("secret", "rel-specon-agent-tokens")
    tokens_file = installed.workdir / "tokens"
    tokens_file.write_bytes(base64.b64decode(secret["data"]["tokens"]))
    tokens = {n: base64.b64decode(secret["data"][n]).decode() for n in installed.nodes}
    port = free_port()
    env.update({"SPECON_MANAGER_PORT": str(port), "SPECON_MANAGER_HOST": "127.0.0.1",
                "SPECON_MANAGER_TOKENS_FILE": str(tokens_file),
                "SPECON_MANAGER_KUBECONFIG": str(installed.kubeconfig_as("manager")),
                # As with two replicas: the Lease the chart's Role allows must be taken.
                "SPECON_MANAGER_LEADER_ELECTION": "true", "POD_NAME": "manager-under-test"})
    exe = shutil.which("specon-manager") or str(Path(os.sys.executable).parent / "specon-manager")
    log = (installed.workdir / "manager.log").open("w")
    proc = subprocess.Popen([exe], env={**os.environ, **env}, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("manager ready (leader)", lambda: _ready(url), timeout=60)
        yield url, tokens
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()


def _ready(url: str) -> bool:
    try:
        status, text = _http(f"{url}/metrics")
    except OSError:
        return False
    return status == 200 and "specon_leader 1.0" in text


def test_real_manager_and_scheduler_place_the_guides_job_as_the_charts_accounts(
        installed: Install, manager_as_chart: tuple[str, dict[str, str]]) -> None:
    url, tokens = manager_as_chart
    plane, ns = installed.plane, installed.namespace
    # The manager took its Lease with the chart's Role.
    lease = installed.get("lease", "rel-specon-manager")
    assert lease["spec"]["holderIdentity"] == "manager-under-test"
    # Agents' tokens from the chart's Secret: each speaks for its own node only.
    a, b = installed.nodes
    for node in (a, b):
        hb = {"node": node, "time": time.time(), "seq": 1, "capacity_cpus": 4,
              "load_cores": 0.5, "jobs": []}
        status, reply = _http(f"{url}/v1/heartbeat", hb, tokens[node])
        assert status == 200 and reply["accepted"] is True
        assert reply["parameters"]["alpha"] == defaults.ALPHA
    status, _ = _http(f"{url}/v1/heartbeat", {"node": b, "time": time.time(), "seq": 2,
                                              "capacity_cpus": 4, "load_cores": 0},
                      tokens[a])
    assert status == 403
    # specon-scheduler: the chart's configuration, its account, the local manager's URL.
    cm = installed.get("configmap", "rel-specon-scheduler")
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    cfg["extenders"][0]["urlPrefix"] = url
    cfg["clientConnection"] = {"kubeconfig": str(installed.kubeconfig_as("scheduler"))}
    plane.run_scheduler(SCHEDULER_NAME, config=cfg)
    try:
        job = yaml.safe_load(EXAMPLE.read_text())
        job["spec"]["template"]["spec"]["schedulerName"] = SCHEDULER_NAME
        job["spec"]["template"]["spec"]["nodeSelector"] = {CHART_LABEL: "true"}
        plane.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(job))

        def placed() -> dict[str, Any] | None:
            items = installed.get("pods", "-l", "job-name=quadratic-descent")["items"]
            return next((p for p in items if p["spec"].get("nodeName")), None)

        pod = wait_for("the example Job's pod placed", placed, timeout=60)
        assert pod["spec"]["nodeName"] in installed.nodes
        assert pod["spec"]["schedulerName"] == SCHEDULER_NAME
        events = installed.get("events", "--field-selector",
                               f"involvedObject.name={pod['metadata']['name']},reason=Scheduled")
        assert [e["reportingComponent"] or e["source"].get("component")
                for e in events["items"]] == [SCHEDULER_NAME]
        # The scheduler asked the extender (both verbs: two feasible nodes).
        _, metrics = _http(f"{url}/metrics")
        for verb in ("filter", "prioritize"):
            assert f'specon_extender_requests_total{{result="ok",verb="{verb}"}}' in metrics
        # The scheduler's leader-election Lease, taken with the chart's Role.
        assert installed.get("lease", "rel-specon-scheduler")["spec"]["holderIdentity"]
        # The agent's own resize actuator, with the agent's account, resizes the pod in place;
        # the account may not patch the pod otherwise.
        from specon_agent.actuators.resize import ResizeActuator

        agent_cfg = installed.kubeconfig_as("agent")
        name = pod["metadata"]["name"]
        resize = ResizeActuator(4.0, plane.server, token=installed.token_for("agent"),
                                ca_file=str(plane.ca_file))
        try:
            resize.register("c1", ns, name, "train")
            change = resize.apply("c1", 0.1875)  # 0.75 of the node's 4 cores
            assert change is not None
        finally:
            resize.close()
        limits = installed.get("pod", name)["spec"]["containers"][0]["resources"]["limits"]
        assert limits["cpu"] == "750m"
        res = plane.kubectl("patch", "-n", ns, "pod", name, "-p",
                            '{"metadata":{"labels":{"x":"y"}}}', kubeconfig=agent_cfg,
                            check=False)
        assert res.returncode != 0 and "forbidden" in res.stderr.lower()
        listed = plane.kubectl("get", "pods", "-A", "--field-selector",
                               f"spec.nodeName={pod['spec']['nodeName']}", "-o", "name",
                               kubeconfig=agent_cfg)
        assert f"pod/{name}" in listed.stdout
    finally:
        plane.stop_scheduler(SCHEDULER_NAME)
        plane.kubectl("delete", "-n", ns, "job", "quadratic-descent", "--wait=false",
                      check=False)
    # Nothing the manager did with its account was refused (nodes, Lease, migration records).
    log = (installed.workdir / "manager.log").read_text()
    assert "403" not in log and "forbidden" not in log.lower(), log[-3000:]
