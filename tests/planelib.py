"""A real Kubernetes control plane for tests marked `plane`: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and KWOK, run from the binaries that
hack/testplane/build.sh built.

Fixtures (registered for every test folder by tests/conftest.py):

- ``plane_bin`` (session): the folder holding the binaries. Taken from ``SPECON_TESTPLANE_BIN``
  (exported by hack/test.d/10-testplane.sh) or the build cache. Missing binaries fail the test,
  unless ``SPECON_SKIP_PLANE=1`` asks to skip; under ``CI=true`` nothing is ever skipped.
- ``plane`` (session): a running :class:`Plane`, torn down at the end of the session.
  ``plane_bin / "helm"`` is Helm 3, built alongside for the chart tests.
- ``plane_namespace`` (function): a fresh namespace in it, deleted after the test.

:class:`Plane`, the API a test uses:

- ``kubeconfig`` (admin: token auth, group system:masters), ``server``, ``ca_file``,
  ``admin_token``; ``kubectl(*args, input=..., check=True, kubeconfig=...)`` runs the
  installed kubectl against the plane; ``api_client()`` returns a ``kubernetes.client.ApiClient``.
- ``add_nodes(n, cpu="4", memory="8Gi", pods=110, prefix="kwok-node", labels=None)`` creates
  KWOK nodes with that capacity (also allocatable) and waits until they are Ready; returns the
  names (the prefix must be unique in the session: every test module shares the plane).
  ``delete_node(name)`` removes one.
- ``complete_pod(namespace, name, phase="Succeeded"|"Failed")`` ends a running pod, as its
  process exiting would (it sets the annotation ``specon.test/complete`` that the KWOK stages in
  hack/testplane/kwok-stages.yaml act on). Pods otherwise stay Running: KWOK reports each
  container's resources in status, and copies spec resources there after an in-place resize.
- ``run_scheduler(scheduler_name="default-scheduler", extenders=None, config=None)`` (re)starts a
  kube-scheduler whose single profile has that ``schedulerName``: for the default name it
  replaces the plane's scheduler, for another name it runs beside it (pods choose it with
  ``spec.schedulerName``). ``extenders`` is the ``KubeSchedulerConfiguration.extenders`` list
  (for example ``[{"urlPrefix": "http://127.0.0.1:PORT", "filterVerb": "filter",
  "prioritizeVerb": "prioritize", "weight": 1, "nodeCacheCapable": False}]``); ``config`` is
  merged over the generated KubeSchedulerConfiguration (top-level keys replace). Returns
  once the scheduler answers /healthz; ``args`` are added to its command line (with
  extenders, ``EXTENDER_LOG_ARGS`` first, unless ``args`` set ``--vmodule``).
  ``stop_scheduler(name)`` stops one;
  ``reset_scheduler()`` puts the plain default scheduler back. The plane is shared by the whole
  session: a test that replaces the default scheduler resets it when done.
- ``service_account_kubeconfig(namespace, name, rules=None, cluster_rules=None)`` creates a
  ServiceAccount (and a Role / ClusterRole bound to it when rules are given, each rule a
  PolicyRule dict), requests a token for it and writes a kubeconfig that acts as it.
- ``request_token(namespace, service_account, audience=None, pod=None)``: a token from the
  TokenRequest API, for an audience, bound to a pod (its claims then name the pod and, since
  1.30, the pod's node), as a projected service-account token volume holds.
- ``logs`` maps each component to its log file; ``log_tails()`` returns their last lines (they
  are attached to the report of every failing test that used the plane).
- ``startup_seconds``: how long start-up took (printed in pytest's terminal summary).

``Plane(..., address=IP, real_nodes=True)`` is the variant that kubelets join
(tests/nodelib.py): the API server binds and advertises ``address`` (an address the nodes'
network namespaces reach), keeps the ``kubernetes`` Service's endpoints, authorizes with
``Node,RBAC`` and the NodeRestriction admission plugin, gives pods service-account tokens (the
ServiceAccount admission plugin is on), and talks to kubelets with a client certificate;
``client_cert(name, cn, orgs)`` and ``cert_kubeconfig(...)`` make the nodes' identities.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "hack" / "testplane" / "build.sh"
KWOK_STAGES = REPO / "hack" / "testplane" / "kwok-stages.yaml"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
DEFAULT_SCHEDULER = "default-scheduler"
COMPLETE_ANNOTATION = "specon.test/complete"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
SERVICE_CIDR = "10.96.0.0/16"
STARTUP_TIMEOUT = 90.0
#: The node lifecycle controller's grace before it marks a silent node unreachable
#: (kube-controller-manager's --node-monitor-grace-period): several of KWOK's heartbeat gaps.
NODE_MONITOR_GRACE_S = 300
#: kube-scheduler flags whenever extenders are given: a failed prioritize call is logged only
#: at V(5) in schedule_one.go ("Failed to run extender's priority function. No score given by
#: this extender."), where a failed filter call is logged at the default level; without it a
#: pod placed without the extender's scores leaves no trace (docs/testplane.md, 2026-11-28).
#: Three lines per pod.
EXTENDER_LOG_ARGS = ("--vmodule=schedule_one=5",)


class PlaneError(RuntimeError):
    """The plane, or one of its components, did not come up or misbehaved."""


def free_port() -> int:
    """A loopback port free right now (the OS picks it; a tiny race until it is bound again)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_pki(pki: Path, extra_ips: Sequence[str] = ()) -> None:
    """A CA, a serving certificate for 127.0.0.1/localhost (and ``extra_ips``) signed by it, and
    the RSA key that signs service-account tokens."""
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=pki)
    _openssl("req", "-x509", "-new", "-key", "ca.key", "-days", "30", "-subj", "/CN=specon-test-ca",
             "-out", "ca.crt", cwd=pki)
    _openssl("genrsa", "-out", "serving.key", "2048", cwd=pki)
    _openssl("req", "-new", "-key", "serving.key", "-subj", "/CN=kube-apiserver",
             "-out", "serving.csr", cwd=pki)
    (pki / "serving.ext").write_text(
        "subjectAltName=IP:127.0.0.1,IP:10.96.0.1," + "".join(f"IP:{ip}," for ip in extra_ips)
        + "DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"
    )
    _openssl("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "30", "-extfile", "serving.ext", "-out", "serving.crt",
             cwd=pki)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def write_kubeconfig(path: Path, server: str, ca_file: Path, token: str, user: str) -> Path:
    """A kubeconfig with one cluster, one token user and one current context."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "plane", "cluster": {"server": server,
                                                    "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "plane", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


@dataclass
class Component:
    """One running binary of the plane, its command line and its log."""

    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            out.write(f"\n=== start: {' '.join(self.argv)}\n".encode())
            out.flush()
            # Own process group, so a stop reaches nothing but this binary.
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text[-lines:])


@dataclass
class Plane:
    """A running control plane; see the module docstring for the API."""

    bin_dir: Path
    workdir: Path
    components: dict[str, Component] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    admin_token: str = ""
    startup_seconds: float = 0.0
    #: The address the API server binds and advertises (real nodes need one they can reach).
    address: str = "127.0.0.1"
    #: The flags kubelets need (module docstring); off for the KWOK-only plane.
    real_nodes: bool = False

    # -- paths ---------------------------------------------------------------------------------
    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def ca_file(self) -> Path:
        return self.pki / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.ports['apiserver']}"

    @property
    def logs(self) -> dict[str, Path]:
        return {name: c.log for name, c in self.components.items()}

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    # -- life cycle ----------------------------------------------------------------------------
    def start(self) -> None:
        t0 = time.monotonic()
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        _make_pki(self.pki, [self.address] if self.address != "127.0.0.1" else [])
        self.admin_token = uuid.uuid4().hex
        self.ports = {name: free_port() for name in
                      ("etcd", "etcd-peer", "apiserver", "controller-manager")}
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{self.admin_token},admin,admin-uid,"system:masters"\n')
        tokens.chmod(0o600)
        write_kubeconfig(self.kubeconfig, self.server, self.ca_file, self.admin_token, "admin")

        etcd_url = f"http://127.0.0.1:{self.ports['etcd']}"
        peer_url = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._launch("etcd", [
            self._bin("etcd"), "--name=plane", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=plane={peer_url}", "--unsafe-no-fsync", "--log-level=warn",
        ])
        self._wait("etcd", lambda: _http_ok(f"{etcd_url}/health"))

        if self.real_nodes:
            kubelet_crt, kubelet_key = self.client_cert(
                "apiserver-kubelet-client", "kube-apiserver-kubelet-client", ["system:masters"])
            mode_flags = [
                "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
                f"--kubelet-client-certificate={kubelet_crt}",
                f"--kubelet-client-key={kubelet_key}",
                # Nodes are reached by the address they report, never by a host name that no
                # resolver here knows.
                "--kubelet-preferred-address-types=InternalIP",
            ]
        else:
            mode_flags = [
                "--authorization-mode=RBAC",
                # Pods need no token volume here (KWOK runs nothing); this spares each test
                # namespace the wait for its default ServiceAccount.
                "--disable-admission-plugins=ServiceAccount",
                # The loopback address cannot be an Endpoints address; nothing here uses the
                # in-cluster `kubernetes` Service.
                "--endpoint-reconciler-type=none",
            ]
        self._launch("kube-apiserver", [
            self._bin("kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            f"--bind-address={self.address}", f"--advertise-address={self.address}",
            f"--secure-port={self.ports['apiserver']}",
            f"--tls-cert-file={self.pki / 'serving.crt'}",
            f"--tls-private-key-file={self.pki / 'serving.key'}",
            f"--client-ca-file={self.ca_file}",
            f"--token-auth-file={tokens}",
            *mode_flags,
            f"--service-account-key-file={self.pki / 'sa.pub'}",
            f"--service-account-signing-key-file={self.pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # Priority and fairness on, as in any real cluster: its per-FlowSchema metrics are
            # the API server's only count of one client's requests (issue 31).
            "--enable-priority-and-fairness=true",
            "--allow-privileged=true", "--profiling=false",
        ])
        self._wait("kube-apiserver", lambda: self._readyz())

        self._launch("kube-controller-manager", [
            self._bin("kube-controller-manager"),
            f"--kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={self.ports['controller-manager']}",
            "--leader-elect=false",
            f"--service-account-private-key-file={self.pki / 'sa.key'}",
            f"--root-ca-file={self.ca_file}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--profiling=false",
            # KWOK's default node stage renews a node's Ready heartbeat every 54-58 s (measured
            # here), past the node lifecycle controller's default 50 s grace: every few minutes
            # a KWOK node was tainted unreachable for a few seconds, and a pod scheduled then
            # went to another node (the Kueue and Kubeflow plane tests' "placed on node 1, not
            # 3" failures, feasibleNodes=3 of 4 in the scheduler's log).
            f"--node-monitor-grace-period={NODE_MONITOR_GRACE_S}s",
        ])
        self._launch("kwok", [
            self._bin("kwok"), f"--kubeconfig={self.kubeconfig}",
            f"--config={KWOK_STAGES}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
        ])
        self._start_scheduler(DEFAULT_SCHEDULER, None, None, wait=False)
        self._wait("kube-controller-manager",
                   lambda: _https_ok(self.ports["controller-manager"], "/healthz"))
        self._wait(f"kube-scheduler-{DEFAULT_SCHEDULER}",
                   lambda: _https_ok(self.ports[f"scheduler-{DEFAULT_SCHEDULER}"], "/healthz"))
        self.startup_seconds = time.monotonic() - t0

    def stop(self) -> None:
        for comp in reversed(list(self.components.values())):
            comp.stop()

    def _launch(self, name: str, argv: list[str]) -> Component:
        comp = Component(name, argv, self.workdir / "logs" / f"{name}.log")
        self.components[name] = comp
        comp.start()
        return comp

    def _wait(self, name: str, ready: Any, timeout: float = STARTUP_TIMEOUT) -> None:
        comp = self.components[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not comp.running():
                raise PlaneError(f"{name} exited with {comp.proc and comp.proc.returncode}; "
                                 f"last lines of {comp.log}:\n{comp.tail()}")
            with contextlib.suppress(OSError, urllib.error.URLError):
                if ready():
                    return
            time.sleep(0.2)
        raise PlaneError(f"{name} not ready after {timeout:.0f} s; last lines of {comp.log}:\n"
                         f"{comp.tail()}")

    def _readyz(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        req = urllib.request.Request(f"{self.server}/readyz",
                                     headers={"Authorization": f"Bearer {self.admin_token}"})
        with urllib.request.urlopen(req, context=ctx, timeout=2) as resp:
            return bool(resp.status == 200)

    # -- schedulers ----------------------------------------------------------------------------
    def _start_scheduler(self, name: str, extenders: Sequence[dict[str, Any]] | None,
                         config: dict[str, Any] | None, wait: bool = True,
                         args: Sequence[str] = ()) -> Component:
        cfg: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": name}],
        }
        if extenders:
            cfg["extenders"] = copy.deepcopy(list(extenders))
        if config:
            cfg.update(copy.deepcopy(config))
        if extenders and not any(a.startswith("--vmodule") for a in args):
            args = (*EXTENDER_LOG_ARGS, *args)
        key = f"scheduler-{name}"
        cfg_path = self.workdir / f"{key}.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg))
        self.ports[key] = free_port()
        comp = self._launch(f"kube-{key}", [
            self._bin("kube-scheduler"), f"--config={cfg_path}",
            "--bind-address=127.0.0.1", f"--secure-port={self.ports[key]}", "--profiling=false",
            *args,
        ])
        if wait:
            self._wait(comp.name, lambda: _https_ok(self.ports[key], "/healthz"))
        return comp

    def run_scheduler(self, scheduler_name: str = DEFAULT_SCHEDULER,
                      extenders: Sequence[dict[str, Any]] | None = None,
                      config: dict[str, Any] | None = None, args: Sequence[str] = ()
                      ) -> Component:
        """(Re)start the kube-scheduler for ``scheduler_name`` with these extenders / config
        (and extra command-line ``args``)."""
        self.stop_scheduler(scheduler_name)
        return self._start_scheduler(scheduler_name, extenders, config, args=args)

    def stop_scheduler(self, scheduler_name: str) -> None:
        comp = self.components.get(f"kube-scheduler-{scheduler_name}")
        if comp is not None:
            comp.stop()

    def reset_scheduler(self) -> None:
        """Put the plain default scheduler back (schedulers with other names keep running)."""
        self.run_scheduler(DEFAULT_SCHEDULER)

    # -- clients -------------------------------------------------------------------------------
    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True,
        kubeconfig: Path | None = None, timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            raise PlaneError("kubectl is not installed")
        cmd = [kubectl, f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        res = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and res.returncode != 0:
            raise PlaneError(
                f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}{res.stderr}")
        return res

    def wait_established(self, *crds: str, timeout: float = 60) -> None:
        """Wait for CRDs (``crd/<name>``) to be Established. kubectl's wait fails at once on a
        CRD created so recently that it has no status yet (``.status.conditions accessor
        error: <nil>``, seen on a loaded machine): that is retried until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(1.0, deadline - time.monotonic())
            res = self.kubectl("wait", "--for=condition=Established", f"--timeout={left:.0f}s",
                               *crds, check=False, timeout=left + 30)
            if res.returncode == 0:
                return
            if "accessor error" not in res.stderr or time.monotonic() > deadline:
                raise PlaneError(f"CRDs not Established: {res.stdout}{res.stderr}")
            time.sleep(0.5)

    def api_client(self, kubeconfig: Path | None = None) -> Any:
        from kubernetes import config as kconfig

        return kconfig.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig))

    # -- nodes and pods ------------------------------------------------------------------------
    def add_nodes(self, n: int, cpu: str = "4", memory: str = "8Gi", pods: int = 110,
                  prefix: str = "kwok-node", labels: dict[str, str] | None = None,
                  timeout: float = 60) -> list[str]:
        """Create n KWOK nodes named ``{prefix}-{i}`` and wait until each is Ready."""
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        names = [f"{prefix}-{i}" for i in range(n)]
        resources = {"cpu": cpu, "memory": memory, "pods": str(pods)}
        for name in names:
            node = {
                "apiVersion": "v1", "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_NODE_ANNOTATION: "fake",
                                    "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                               "kubernetes.io/arch": "amd64", "type": "kwok", **(labels or {})},
                },
                "spec": {},
                "status": {"capacity": resources, "allocatable": resources},
            }
            try:
                core.create_node(node)
            except client.ApiException as exc:
                # The name carries the caller's unique prefix: a 409 is this create itself,
                # sent again by the client after a connection dropped under load (seen once:
                # "nodes ... already exists" on a fresh prefix).
                if exc.status != 409:
                    raise
        deadline = time.monotonic() + timeout
        pending = set(names)
        while pending and time.monotonic() < deadline:
            for name in list(pending):
                node = core.read_node(name)
                conds = {c.type: c.status for c in (node.status.conditions or [])}
                taints = [t.key for t in (node.spec.taints or [])]
                # Ready, and the node controller has lifted its not-ready taint.
                if conds.get("Ready") == "True" and "node.kubernetes.io/not-ready" not in taints:
                    pending.discard(name)
            time.sleep(0.2)
        if pending:
            raise PlaneError(f"KWOK nodes not Ready after {timeout:.0f} s: {sorted(pending)}\n"
                             f"{self.components['kwok'].tail()}")
        return names

    def delete_node(self, name: str) -> None:
        self.kubectl("delete", "node", name, "--wait=false")

    def complete_pod(self, namespace: str, name: str, phase: str = "Succeeded") -> None:
        """End a running pod with this phase (Succeeded: exit 0, Failed: exit 1)."""
        if phase not in ("Succeeded", "Failed"):
            raise ValueError(f"phase must be Succeeded or Failed, not {phase!r}")
        self.kubectl("annotate", "--overwrite", "-n", namespace, f"pod/{name}",
                     f"{COMPLETE_ANNOTATION}={phase}")

    # -- identities ----------------------------------------------------------------------------
    def client_cert(self, name: str, cn: str, orgs: Sequence[str] = ()) -> tuple[Path, Path]:
        """A client certificate (user ``cn``, groups ``orgs``) signed by the plane's CA:
        (certificate, key) files under the PKI folder."""
        subject = "".join(f"/O={o}" for o in orgs) + f"/CN={cn}"
        crt, key = self.pki / f"{name}.crt", self.pki / f"{name}.key"
        _openssl("genrsa", "-out", key.name, "2048", cwd=self.pki)
        _openssl("req", "-new", "-key", key.name, "-subj", subject, "-out", f"{name}.csr",
                 cwd=self.pki)
        (self.pki / f"{name}.ext").write_text(
            "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "30", "-extfile", f"{name}.ext", "-out", crt.name,
                 cwd=self.pki)
        key.chmod(0o600)
        return crt, key

    def cert_kubeconfig(self, path: Path, cert: Path, key: Path, user: str) -> Path:
        """A kubeconfig that authenticates with this client certificate."""
        cluster = {"server": self.server, "certificate-authority": str(self.ca_file)}
        doc = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "plane", "cluster": cluster}],
            "users": [{"name": user, "user": {"client-certificate": str(cert),
                                              "client-key": str(key)}}],
            "contexts": [{"name": user, "context": {"cluster": "plane", "user": user}}],
            "current-context": user,
        }
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        return path

    # -- RBAC ----------------------------------------------------------------------------------
    def service_account_kubeconfig(self, namespace: str, name: str,
                                   rules: Sequence[dict[str, Any]] | None = None,
                                   cluster_rules: Sequence[dict[str, Any]] | None = None,
                                   expiration_seconds: int = 3600) -> Path:
        """A kubeconfig acting as ServiceAccount ``namespace/name``, created with a Role (and a
        ClusterRole) holding these rules when given."""
        sa_user = f"system:serviceaccount:{namespace}:{name}"
        docs: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": name, "namespace": namespace}},
        ]
        subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
        if rules:
            docs += [
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": name, "namespace": namespace}, "rules": list(rules)},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": name, "namespace": namespace}, "subjects": subject,
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                             "name": name}},
            ]
        if cluster_rules:
            cname = f"{namespace}-{name}"
            docs += [
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                 "metadata": {"name": cname}, "rules": list(cluster_rules)},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": cname}, "subjects": subject,
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                             "name": cname}},
            ]
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
        token = self.kubectl("create", "token", "-n", namespace, name,
                             f"--duration={expiration_seconds}s").stdout.strip()
        path = self.workdir / f"sa-{namespace}-{name}.kubeconfig"
        return write_kubeconfig(path, self.server, self.ca_file, token, sa_user)

    def request_token(self, namespace: str, service_account: str, audience: str | None = None,
                      pod: dict[str, Any] | None = None, duration_s: int = 600) -> str:
        """A token of ServiceAccount ``namespace/service_account`` from the TokenRequest API:
        for ``audience`` (default: the API server's), bound to ``pod`` (a Pod object, by name
        and UID) when given, as the kubelet's projected volume gets for a pod."""
        args = ["create", "token", "-n", namespace, service_account, f"--duration={duration_s}s"]
        if audience is not None:
            args.append(f"--audience={audience}")
        if pod is not None:
            args += ["--bound-object-kind=Pod", f"--bound-object-name={pod['metadata']['name']}",
                     f"--bound-object-uid={pod['metadata']['uid']}"]
        return self.kubectl(*args).stdout.strip()

    # -- diagnostics ---------------------------------------------------------------------------
    def log_tails(self, lines: int = 30) -> str:
        parts = [f"--- {name} ({c.log}) ---\n{c.tail(lines)}"
                 for name, c in self.components.items()]
        return "\n".join(parts)


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)


def _https_ok(port: int, path: str) -> bool:
    # The scheduler and controller manager serve a self-signed certificate they generate in
    # memory; /healthz is open to anonymous callers, so only liveness is learnt here.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=ctx, timeout=2) as r:
        return bool(r.status == 200)


# -- locating the binaries -----------------------------------------------------------------------
def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def find_bin_dir() -> tuple[Path | None, str]:
    """The binaries' folder, or None and why not."""
    env = os.environ.get("SPECON_TESTPLANE_BIN")
    if env:
        candidate = Path(env)
        origin = "SPECON_TESTPLANE_BIN"
    else:
        try:
            out = subprocess.run(["bash", str(BUILD_SCRIPT), "--print"], capture_output=True,
                                 text=True, check=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"cannot ask {BUILD_SCRIPT.name} for the cache folder: {exc}"
        candidate = Path(out)
        origin = "the build cache"
    missing = [b for b in BINARIES if not os.access(candidate / b, os.X_OK)]
    if missing:
        return None, (f"test plane binaries missing in {candidate} ({origin}): "
                      f"{', '.join(missing)}; "
                      "build them with `bash hack/testplane/build.sh` (needs Go), or set "
                      "SPECON_SKIP_PLANE=1 to skip the tests marked `plane`")
    return candidate, ""


def require_bin_dir() -> Path:
    """The binaries' folder; skips only on an explicit SPECON_SKIP_PLANE=1 outside CI."""
    ci = _truthy("CI")
    if _truthy("SPECON_SKIP_PLANE") and not ci:
        pytest.skip("SPECON_SKIP_PLANE=1: the real Kubernetes test plane was skipped on request "
                    "(no Go toolchain or no time to build it); CI never skips it")
    bin_dir, why = find_bin_dir()
    if bin_dir is None:
        pytest.fail(why + (" (CI=true: the plane is never skipped in CI)" if ci else ""),
                    pytrace=False)
    return bin_dir


# -- fixtures ------------------------------------------------------------------------------------
_PLANES: list[Plane] = []


@pytest.fixture(scope="session")
def plane_bin() -> Path:
    return require_bin_dir()


@contextlib.contextmanager
def started_plane(bin_dir: Path, workdir: Path) -> Iterator[Plane]:
    """A plane started in ``workdir``, stopped on the way out."""
    p = Plane(bin_dir=bin_dir, workdir=workdir)
    _PLANES.append(p)
    try:
        p.start()
    except BaseException:
        p.stop()
        raise
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="session")
def plane(plane_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with started_plane(plane_bin, tmp_path_factory.mktemp("plane")) as p:
        yield p


@pytest.fixture
def plane_namespace(plane: Plane) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    plane.kubectl("create", "namespace", name)
    yield name
    plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


# -- hooks (tests/conftest.py re-exports these) -------------------------------------------------
#: The fixtures that need the plane's binaries: a test using one is a ``plane`` test.
PLANE_FIXTURES = frozenset({"plane", "plane_bin", "plane_namespace"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``plane`` every test that uses the plane's binaries, before ``-m`` selects: a test
    that only renders the chart with the plane's helm once ran in the first pass unmarked,
    and on a cold machine (binaries still building) it failed (docs/testplane.md)."""
    for item in items:
        if PLANE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.plane)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and "plane" in getattr(item, "fixturenames", ()) and _PLANES:
        report.sections.append(("test plane logs (last lines)", _PLANES[-1].log_tails()))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for p in _PLANES:
        if p.startup_seconds:
            terminalreporter.write_line(
                f"test plane: started in {p.startup_seconds:.1f} s (logs: {p.workdir / 'logs'})")


def dump_json(obj: Any) -> str:
    """Compact JSON for kubectl patches."""
    return json.dumps(obj, separators=(",", ":"))
