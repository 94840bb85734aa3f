"""The chart against the real control plane: every rendering is accepted by the API server
(server-side dry run), the chart installs and each object exists and runs as its own service
account, the RBAC is enough for what each component does and refuses what it does not do, and
the real manager and kube-scheduler, each acting only as the chart's service account, place the
user guide's training Job."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from deploylib import ACTUATORS, CHART, DEPLOY, docs, helm, pod_spec, render, set_args
from planelib import Plane, free_port, write_kubeconfig

from specon import defaults
from specon_manager.kube import event_body

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
    other: str = ""  # a namespace not in manager.trainingNamespaces

    def token_for(self, component: str) -> str:
        return str(self.plane.kubectl("create", "token", "-n", self.namespace,
                                      self.accounts[component], "--duration=3600s").stdout.strip())

    def kubeconfig_as(self, component: str, token: str | None = None) -> Path:
        sa = self.accounts[component]
        token = token or self.token_for(component)
        return write_kubeconfig(self.workdir / f"{component}.kubeconfig", self.plane.server,
                                self.plane.ca_file, token,
                                f"system:serviceaccount:{self.namespace}:{sa}")

    def agent_pods(self) -> dict[str, dict[str, Any]]:
        """node -> the agent DaemonSet's pod there."""
        items = self.get("pods", "-l", "app.kubernetes.io/component=agent")["items"]
        return {p["spec"]["nodeName"]: p for p in items if p["spec"].get("nodeName")}

    def agent_token(self, node: str, audience: str | None = None) -> str:
        """What the kubelet gives the agent pod on ``node``: a token bound to that pod, for
        ``audience`` (None: the API server's, as the pod's own service-account token)."""
        pod = wait_for(f"the agent pod on {node}", lambda: self.agent_pods().get(node))
        return self.plane.request_token(self.namespace, self.accounts["agent"], audience, pod)

    def write(self, kind: str, name: str, key: str) -> Path:
        """One key of a Secret or ConfigMap of the release, as a file (what a volume holds)."""
        obj = self.get(kind, name)
        value = obj["data"][key]
        path = self.workdir / f"{name}-{key}"
        path.write_bytes(base64.b64decode(value) if kind == "secret" else value.encode())
        return path

    def get(self, *args: str) -> Any:
        return json.loads(self.plane.kubectl("get", "-n", self.namespace, *args,
                                             "-o", "json").stdout)


@pytest.fixture(scope="module")
def installed(plane: Plane, plane_bin: Path, home: Path,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Install]:
    ns = fresh_namespace(plane)
    other = fresh_namespace(plane)  # a namespace that did not opt in
    nodes = plane.add_nodes(2, prefix="chart-install", labels={CHART_LABEL: "true"})
    release = "rel"
    only_ours = {CHART_LABEL: "true"}
    values: dict[str, Any] = {
        "agent.actuator": "resize", "scheduler.schedulerName": SCHEDULER_NAME,
        "agent.nodeSelector": only_ours, "manager.nodeSelector": only_ours,
        "scheduler.nodeSelector": only_ours, "manager.trainingNamespaces": [ns],
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
                    "scheduler": "rel-specon-scheduler"}, other)
    try:
        yield inst
    finally:
        # KWOK runs no container, so the uninstall hook's Job would never end here: it is run
        # as its own account by tests/deploy/test_drain_plane.py, and for real inside
        # `helm uninstall` by tests/nodes/test_e2e.py.
        helm(plane_bin, "uninstall", release, "--namespace", ns, "--kubeconfig",
             str(plane.kubeconfig), "--no-hooks", home=home, check=False)
        for node in nodes:
            plane.delete_node(node)
        for name in (ns, other):
            plane.kubectl("delete", "namespace", name, "--wait=false", check=False)
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
                     "ServiceAccount", "ValidatingAdmissionPolicy",
                     "ValidatingAdmissionPolicyBinding"]
    # No shared agent tokens: a Secret for each TLS certificate, nothing else.
    assert sorted(o["metadata"]["name"] for o in objs if o["kind"] == "Secret") == [
        "rel-specon-manager-tls", "rel-specon-scheduler-tls"]
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
    # Each agent's identity is a projected token for the manager's audience, bound to its pod;
    # no agent mounts a Secret.
    for p in agents:
        sources = [s for v in p["spec"]["volumes"] if "projected" in v
                   for s in v["projected"]["sources"]]
        assert {"serviceAccountToken": {"audience": "specon-manager",
                                        "expirationSeconds": 3600, "path": "token"}} in sources
        assert not [v for v in p["spec"]["volumes"] if "secret" in v]


def can_i(install: Install, component: str, *args: str) -> bool:
    kubeconfig = install.kubeconfig_as(component)
    res = install.plane.kubectl("auth", "can-i", *args, kubeconfig=kubeconfig, check=False)
    return res.stdout.strip() == "yes"


EVICT = ["create", "pods", "--subresource=eviction"]
# NS: the release's namespace (in manager.trainingNamespaces); OTHER: one that did not opt in.
WRITES = [["create", "pods"], ["patch", "pods"], ["delete", "pods"], EVICT,
          ["patch", "jobs.batch"], ["create", "events"], ["create", "events.events.k8s.io"]]


@pytest.mark.parametrize(("component", "allowed", "refused"), [
    ("manager",
     [["list", "nodes"], ["get", "nodes"], ["get", "pods", "-A"], ["get", "jobs.batch", "-A"],
      ["create", "tokenreviews.authentication.k8s.io"],
      *([*w, "-n", "NS"] for w in WRITES)],
     [*([*w, "-n", "OTHER"] for w in WRITES), *([*w, "-n", "kube-system"] for w in WRITES),
      ["create", "pods", "-A"], ["delete", "jobs.batch", "-A"], ["list", "secrets", "-A"],
      ["update", "nodes"]]),
    ("agent",
     [["list", "pods", "-A"], ["watch", "pods", "-A"],
      ["patch", "pods", "--subresource=resize", "-A"]],
     [["patch", "pods", "-A"], ["list", "secrets", "-A"], [*EVICT, "-A"],
      ["create", "tokenreviews.authentication.k8s.io"]]),
    ("scheduler",
     [["create", "pods", "--subresource=binding", "-A"], ["watch", "nodes"],
      ["patch", "pods", "--subresource=status", "-A"]],
     [["create", "pods", "-A"], ["list", "secrets", "-A"]]),
])
def test_rbac_allows_each_components_verbs_and_refuses_others(
        installed: Install, component: str, allowed: list[list[str]],
        refused: list[list[str]]) -> None:
    where = {"NS": installed.namespace, "OTHER": installed.other}
    for verb in allowed:
        verb = [where.get(a, a) for a in verb]
        assert can_i(installed, component, *verb), f"{component} cannot {verb}"
    for verb in refused:
        verb = [where.get(a, a) for a in verb]
        assert not can_i(installed, component, *verb), f"{component} may {verb}"


def may(install: Install, component: str, verb: str, group: str, resource: str,
        namespace: str = "") -> bool:
    """A SelfSubjectAccessReview as ``component``: unlike ``kubectl auth can-i``, it needs no
    CRD installed to ask about a custom resource (can-i asks about the literal name then)."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"verb": verb, "group": group,
                                              "resource": resource, "namespace": namespace}}}
    res = install.plane.kubectl("create", "--validate=false", "-f", "-", "-o",
                                "jsonpath={.status.allowed}",
                                input=json.dumps(review),
                                kubeconfig=install.kubeconfig_as(component))
    return res.stdout.strip() == "true"


def test_the_manager_reads_kubeflow_owners_and_records_only_on_pytorchjobs(
        installed: Install) -> None:
    """PyTorchJobs hold a migration's record (patched only in the training namespaces);
    a JobSet is only read (the record is on its Job)."""
    ns, other = installed.namespace, installed.other
    kf, js = ("kubeflow.org", "pytorchjobs"), ("jobset.x-k8s.io", "jobsets")
    assert may(installed, "manager", "list", *kf)
    assert may(installed, "manager", "get", *js)
    assert may(installed, "manager", "patch", *kf, ns)
    assert not may(installed, "manager", "patch", *kf, other)
    assert not may(installed, "manager", "patch", *js, ns)
    assert not may(installed, "manager", "list", *js)
    assert not may(installed, "agent", "get", *kf)


def _pinned(name: str, node: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{
                "name": "train", "image": "train:local",
                "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}}}]}}


def _refused(res: subprocess.CompletedProcess[str], why: str = "forbidden") -> bool:
    return res.returncode != 0 and why in res.stderr.lower()


def test_each_forbidden_write_is_refused_by_the_api_server(installed: Install) -> None:
    """Not only what RBAC says (can-i): the real requests, as the chart's accounts."""
    plane, ns, other = installed.plane, installed.namespace, installed.other
    a, b = installed.nodes
    for where in (ns, other):
        plane.kubectl("apply", "-n", where, "-f", "-", input=json.dumps(_pinned("victim", a)))
        plane.kubectl("create", "job", "-n", where, "victim-job", "--image=train:local")
    manager = installed.kubeconfig_as("manager")

    def as_manager(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return plane.kubectl(*args, kubeconfig=manager, check=False, input=input)

    evict = json.dumps({"apiVersion": "policy/v1", "kind": "Eviction",
                        "metadata": {"name": "victim"}})

    def evict_in(where: str) -> subprocess.CompletedProcess[str]:
        return plane.kubectl("create", "--raw",
                             f"/api/v1/namespaces/{where}/pods/victim/eviction", "-f", "-",
                             input=evict, kubeconfig=manager, check=False)

    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "victim."},
             "involvedObject": {"kind": "Pod", "name": "victim", "namespace": other},
             "reason": "Planted", "message": "x"}

    def v1_event(where: str) -> str:
        """An Event as the manager posts it (events.k8s.io/v1)."""
        return json.dumps(event_body({"apiVersion": "v1", "metadata": {
            "name": "victim", "namespace": where}}, "Planted", "x", action="Migrate"))

    # The manager's writes, everywhere but in the namespaces that opted in: refused.
    refusals = {
        "create a pod in kube-system": as_manager(
            "create", "-n", "kube-system", "-f", "-", input=json.dumps(_pinned("planted", a))),
        "create a pod": as_manager("create", "-n", other, "-f", "-",
                                   input=json.dumps(_pinned("planted", a))),
        "patch a pod": as_manager("annotate", "-n", other, "pod", "victim", "x=y"),
        "delete a pod": as_manager("delete", "-n", other, "pod", "victim", "--wait=false"),
        "evict a pod": evict_in(other),
        "patch a Job": as_manager("annotate", "-n", other, "job", "victim-job", "x=y"),
        "post an event": as_manager("create", "-n", other, "-f", "-", input=json.dumps(event)),
        "post an events.k8s.io event": as_manager("create", "-n", other, "-f", "-",
                                                  input=v1_event(other)),
    }
    for what, res in refusals.items():
        assert _refused(res), (what, res.stdout, res.stderr)
    # ... and the same writes in the release's namespace are allowed.
    assert as_manager("annotate", "-n", ns, "pod", "victim", "x=y").returncode == 0
    assert as_manager("annotate", "-n", ns, "job", "victim-job", "x=y").returncode == 0
    res = evict_in(ns)
    assert res.returncode == 0, res.stderr
    # the manager's own Event body, as the API server validates it (events.k8s.io/v1)
    res = as_manager("create", "-n", ns, "-f", "-", input=v1_event(ns))
    assert res.returncode == 0, res.stderr
    # The agent: no pod writes but resize, and a resize only on its own node.
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(_pinned("on-b", b)))
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(_pinned("on-a", a)))
    resize = json.dumps({"spec": {"containers": [{"name": "train",
                                                  "resources": {"limits": {"cpu": "500m"}}}]}})

    def as_agent(token: str, pod: str) -> httpx.Response:
        """The agent's resize, as its actuator sends it (one PATCH, no read first)."""
        ctx = ssl.create_default_context(cafile=str(plane.ca_file))
        return httpx.patch(f"{plane.server}/api/v1/namespaces/{ns}/pods/{pod}/resize",
                           content=resize, verify=ctx, timeout=10, headers={
                               "Authorization": f"Bearer {token}",
                               "Content-Type": "application/strategic-merge-patch+json"})

    token_a = installed.agent_token(a)  # what the agent pod on node a holds
    wait_for("on-a running with its resources reported", lambda: (
        installed.get("pod", "on-a")["status"].get("containerStatuses") or [{}])[0].get(
            "resources"))
    refused = as_agent(token_a, "on-b")
    assert refused.status_code == 403 and "own node" in refused.text, refused.text
    unbound = as_agent(installed.token_for("agent"), "on-a")  # bound to no pod, no node
    assert unbound.status_code == 403 and "own node" in unbound.text, unbound.text
    mine = as_agent(token_a, "on-a")
    assert mine.status_code == 200, mine.text
    cfg = installed.kubeconfig_as("agent", token_a)
    for verb in (["label", "-n", ns, "pod", "on-a", "x=y"],
                 ["get", "secrets", "-n", ns], ["delete", "-n", ns, "pod", "on-b"]):
        assert _refused(plane.kubectl(*verb, kubeconfig=cfg, check=False)), verb


# -- the real programs, acting as the chart's service accounts ------------------------------------
@dataclass
class ChartManager:
    """The real specon-manager as the chart runs it, on loopback: its URLs, and what a client
    needs to verify it (the chart's CA, the name in its certificate)."""

    url: str
    extender_url: str
    ca: Path
    server_name: str

    def client(self, cert: tuple[Path, Path] | None = None) -> httpx.Client:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        if cert is not None:
            ctx.load_cert_chain(str(cert[0]), str(cert[1]))
        return httpx.Client(verify=ctx, timeout=10)

    def call(self, path: str, body: Any = None, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # The certificate names the Service; the connection goes to loopback.
        with self.client() as c:
            if body is None:
                return c.get(f"{self.url}{path}", headers=headers,
                             extensions={"sni_hostname": self.server_name})
            return c.post(f"{self.url}{path}", json=body, headers=headers,
                          extensions={"sni_hostname": self.server_name})


@pytest.fixture
def manager_as_chart(installed: Install) -> Iterator[ChartManager]:
    """specon-manager with the chart Deployment's environment, its service account's
    kubeconfig and the chart's certificates (the files its Secret volume holds)."""
    deploy = installed.get("deployment", "rel-specon-manager")
    container = pod_spec(deploy)["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    tls = "rel-specon-manager-tls"
    port, ext_port = free_port(), free_port()
    env.update({"SPECON_MANAGER_PORT": str(port), "SPECON_MANAGER_HOST": "127.0.0.1",
                "SPECON_MANAGER_EXTENDER_PORT": str(ext_port),
                "SPECON_MANAGER_TLS_CERT_FILE": str(installed.write("secret", tls, "tls.crt")),
                "SPECON_MANAGER_TLS_KEY_FILE": str(installed.write("secret", tls, "tls.key")),
                "SPECON_MANAGER_EXTENDER_CLIENT_CA_FILE": str(
                    installed.write("secret", tls, "ca.crt")),
                "SPECON_MANAGER_KUBECONFIG": str(installed.kubeconfig_as("manager")),
                # As with two replicas: the Lease the chart's Role allows must be taken.
                "SPECON_MANAGER_LEADER_ELECTION": "true", "POD_NAME": "manager-under-test"})
    exe = shutil.which("specon-manager") or str(Path(os.sys.executable).parent / "specon-manager")
    log = (installed.workdir / "manager.log").open("w")
    proc = subprocess.Popen([exe], env={**os.environ, **env}, stdout=log,
                            stderr=subprocess.STDOUT)
    m = ChartManager(f"https://127.0.0.1:{port}", f"https://127.0.0.1:{ext_port}",
                     installed.write("configmap", "rel-specon-ca", "ca.crt"),
                     f"rel-specon-manager.{installed.namespace}.svc")
    try:
        wait_for("manager ready (leader)", lambda: _ready(m), timeout=60)
        yield m
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()


def _ready(m: ChartManager) -> bool:
    try:
        r = m.call("/metrics")
    except httpx.HTTPError:
        return False
    return r.status_code == 200 and "specon_manager_leader 1.0" in r.text


def test_real_manager_and_scheduler_place_the_guides_job_as_the_charts_accounts(
        installed: Install, manager_as_chart: ChartManager) -> None:
    m = manager_as_chart
    plane, ns = installed.plane, installed.namespace
    # The manager took its Lease with the chart's Role.
    lease = installed.get("lease", "rel-specon-manager")
    assert lease["spec"]["holderIdentity"] == "manager-under-test"
    # Agents' tokens as the kubelet projects them into the DaemonSet's pods (bound to the pod,
    # for the manager's audience), over HTTPS verified with the chart's CA: each speaks for its
    # own node only.
    a, b = installed.nodes
    tokens = {n: installed.agent_token(n, "specon-manager") for n in (a, b)}
    for node in (a, b):
        hb = {"node": node, "time": time.time(), "seq": 1, "capacity_cpus": 4,
              "load_cores": 0.5, "jobs": []}
        r = m.call("/v1/heartbeat", hb, tokens[node])
        assert r.status_code == 200 and r.json()["accepted"] is True, r.text
        assert r.json()["parameters"]["alpha"] == defaults.ALPHA
    r = m.call("/v1/heartbeat", {"node": b, "time": time.time(), "seq": 2, "capacity_cpus": 4,
                                 "load_cores": 0}, tokens[a])
    assert r.status_code == 403
    # The agent's API-server token (or any token not for the manager) is refused.
    r = m.call("/v1/heartbeat", {"node": a, "time": time.time(), "seq": 3, "capacity_cpus": 4,
                                 "load_cores": 0}, installed.agent_token(a))
    assert r.status_code == 401
    refusals = 'specon_manager_agent_auth_refusals_total{reason="audience"} 1.0'
    assert refusals in m.call("/metrics").text
    # specon-scheduler: the chart's configuration and client certificate, its account, the
    # local manager's extender port (serverName: the certificate names the Service).
    cm = installed.get("configmap", "rel-specon-scheduler")
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    ext = cfg["extenders"][0]
    assert ext["urlPrefix"] == f"https://{m.server_name}:8443" and ext["enableHTTPS"] is True
    sch = "rel-specon-scheduler-tls"
    ext["urlPrefix"] = m.extender_url
    ext["tlsConfig"] = {"certFile": str(installed.write("secret", sch, "tls.crt")),
                        "keyFile": str(installed.write("secret", sch, "tls.key")),
                        "caFile": str(installed.write("secret", sch, "ca.crt")),
                        "serverName": m.server_name}
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
        metrics = m.call("/metrics").text
        for verb in ("filter", "prioritize"):
            assert f'specon_manager_extender_requests_total{{result="ok",verb="{verb}"}}' in metrics
        # The scheduler's leader-election Lease, taken with the chart's Role.
        assert installed.get("lease", "rel-specon-scheduler")["spec"]["holderIdentity"]
        # The agent's own resize actuator, with the agent's account, resizes the pod in place;
        # the account may not patch the pod otherwise.
        from specon_agent.actuators.resize import ResizeActuator

        # The agent of the pod's node, with its pod-bound token (the admission policy admits
        # a resize only on the token's node).
        agent_token = installed.agent_token(pod["spec"]["nodeName"])
        agent_cfg = installed.kubeconfig_as("agent", agent_token)
        name = pod["metadata"]["name"]
        resize = ResizeActuator(4.0, plane.server, token=agent_token,
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
    # (The API server's answers as the client logs them: "HTTP/1.1 403 Forbidden"; a bare "403"
    # also matches a log line's milliseconds.)
    refused = [ln for ln in log.splitlines()
               if re.search(r"HTTP/\d(?:\.\d)? 403\b", ln) or "forbidden" in ln.lower()]
    assert not refused, "\n".join(refused[:20])
