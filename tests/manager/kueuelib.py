"""The real Kueue controller beside the test plane, for the Kueue side-by-side plane test.

``kueue_bin()`` finds the folder hack/ecosystem/kueue/build.sh filled (``SPECON_KUEUE_BIN``, or
the build cache): the ``kueue`` binary, the CRDs (``crd/``), the CRD conversion-webhook patches
(``crd-conversion/``) and the webhook configurations (``webhook/manifests.yaml``), all as the
pinned module ships them. :class:`Kueue` applies them to a :class:`planelib.Plane` and runs the
controller as a process on loopback:

- The plane's API server cannot reach Service IPs, so every webhook (the admission webhooks of
  Kueue's own kinds and of ``batch/v1`` Jobs, and the CRDs' conversion webhooks) is pointed at
  the controller's webhook server by ``url: https://127.0.0.1:<port>/<path>``; the paths,
  rules, selectors and failure policies are upstream's. Webhooks of integrations that are not
  enabled (pods, Deployments, Kubeflow, Ray, ...) are left out, as a Kueue configured with only
  ``batch/job`` serves them to no purpose.
- The serving certificate is made here (``IP:127.0.0.1`` and the Service's DNS name) with a CA
  of our own, and handed to Kueue's internal certificate management in the Secret it reads
  (``kueue-system/kueue-webhook-server-cert``) and in its certificate folder, as a kubelet would
  mount that Secret. Kueue finds both valid and keeps them (docs/testplane.md says why internal
  certificate management stays on: with it off, v0.17 exits unless its metrics certificate is
  at the fixed path ``/etc/kueue/metrics/certs``).
- The configuration: ``integrations.frameworks: [batch/job]``,
  ``manageJobsWithoutQueueName: false``, no leader election, no metrics listener, the
  VisibilityOnDemand API server off (it would need the plane's aggregation layer).
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from planelib import REPO, Component, Plane, PlaneError, free_port

BUILD_SCRIPT = REPO / "hack" / "ecosystem" / "kueue" / "build.sh"
NAMESPACE = "kueue-system"
SERVICE = "kueue-webhook-service"
SECRET = "kueue-webhook-server-cert"
#: Kueue's internal certificate management renews anything valid for less than 90 days.
CERT_DAYS = 365
#: Admission webhooks kept from upstream's manifests: Kueue's own kinds and batch/v1 Jobs.
WEBHOOK_PATHS = ("kueue-x-k8s-io", "batch-v1-job")
API = "kueue.x-k8s.io/v1beta2"


def kueue_bin() -> Path:
    """The build's folder; skips as the plane does (SPECON_SKIP_PLANE=1 outside CI), else fails
    with how to build it."""
    ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    if os.environ.get("SPECON_SKIP_PLANE", "").lower() in ("1", "true", "yes") and not ci:
        pytest.skip("SPECON_SKIP_PLANE=1: the plane (and Kueue beside it) was skipped on request")
    env = os.environ.get("SPECON_KUEUE_BIN")
    if env:
        folder = Path(env)
    else:
        out = subprocess.run(["bash", str(BUILD_SCRIPT), "--print"], capture_output=True,
                             text=True, check=True, timeout=30).stdout.strip()
        folder = Path(out)
    if not (folder / ".complete").exists():
        pytest.fail(f"Kueue is not built in {folder}: run `bash hack/ecosystem/kueue/build.sh` "
                    "(needs Go), or `bash hack/test.sh`, which does", pytrace=False)
    return folder


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(folder: Path) -> dict[str, Path]:
    """A CA as Kueue's cert-controller makes one (CN and DNS name ``kueue-ca``, a PKCS#1 key,
    which it parses) and a serving certificate it signed, for the Service's DNS name (what
    Kueue checks) and 127.0.0.1 (what the API server dials)."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("genrsa", "-traditional", "-out", "ca.key", "2048", cwd=folder)
    _openssl("req", "-x509", "-new", "-key", "ca.key", "-days", str(CERT_DAYS),
             "-subj", "/O=kueue/CN=kueue-ca", "-addext", "subjectAltName=DNS:kueue-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,digitalSignature,keyEncipherment",
             "-out", "ca.crt", cwd=folder)
    _openssl("genrsa", "-traditional", "-out", "tls.key", "2048", cwd=folder)
    dns = f"{SERVICE}.{NAMESPACE}.svc"
    _openssl("req", "-new", "-key", "tls.key", "-subj", f"/CN={dns}", "-out", "tls.csr",
             cwd=folder)
    (folder / "tls.ext").write_text(
        f"subjectAltName=DNS:{dns},IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
        "keyUsage=digitalSignature,keyEncipherment\n")
    _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", str(CERT_DAYS), "-extfile", "tls.ext",
             "-out", "tls.crt", cwd=folder)
    return {n: folder / n for n in ("ca.crt", "ca.key", "tls.crt", "tls.key")}


def webhook_configurations(manifests: Path, base: str, ca: bytes) -> list[dict[str, Any]]:
    """Upstream's two webhook configurations, named as Kueue's cert-controller expects
    (``kueue-{mutating,validating}-webhook-configuration``), with only the webhooks of
    :data:`WEBHOOK_PATHS`, each pointed at ``base`` + its upstream path."""
    out = []
    for doc in yaml.safe_load_all(manifests.read_text()):
        if not doc:
            continue
        kind = doc["kind"]
        doc["metadata"] = {"name": "kueue-" + doc["metadata"]["name"]}
        hooks = []
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            if not any(p in path for p in WEBHOOK_PATHS):
                continue
            hook["clientConfig"] = {"url": base + path,
                                    "caBundle": base64.b64encode(ca).decode()}
            hooks.append(hook)
        assert hooks, f"no Kueue or Job webhook in {manifests} ({kind})"
        doc["webhooks"] = hooks
        out.append(doc)
    return out


def crds(folder: Path, base: str, ca: bytes) -> list[dict[str, Any]]:
    """The CRDs, with upstream's conversion-webhook patches applied (pointed at ``base``)."""
    patches = {}
    for path in sorted((folder / "crd-conversion").glob("*.yaml")):
        patch = yaml.safe_load(path.read_text())
        conv = patch["spec"]["conversion"]
        conv["webhook"]["clientConfig"] = {
            "url": base + conv["webhook"]["clientConfig"]["service"]["path"],
            "caBundle": base64.b64encode(ca).decode()}
        patches[patch["metadata"]["name"]] = conv
    out = []
    for path in sorted((folder / "crd").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if doc["metadata"]["name"] in patches:
            doc["spec"]["conversion"] = patches[doc["metadata"]["name"]]
        out.append(doc)
    return out


class Kueue:
    """Kueue's controller manager running against ``plane`` (see the module docstring)."""

    def __init__(self, plane: Plane, folder: Path, workdir: Path) -> None:
        self.plane = plane
        self.folder = folder
        self.workdir = workdir
        self.webhook_port = free_port()
        self.health_port = free_port()
        self.comp: Component | None = None
        #: From the first object applied to /readyz answering 200.
        self.startup_seconds = 0.0

    @property
    def log(self) -> Path:
        return self.workdir / "kueue.log"

    def start(self, timeout: float = 120) -> None:
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        certs = make_certs(self.workdir / "certs")
        ca = certs["ca.crt"].read_bytes()
        base = f"https://127.0.0.1:{self.webhook_port}"
        docs: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
             "metadata": {"name": SECRET, "namespace": NAMESPACE},
             "data": {name: base64.b64encode(p.read_bytes()).decode()
                      for name, p in certs.items()}},
            *crds(self.folder, base, ca),
            *webhook_configurations(self.folder / "webhook" / "manifests.yaml", base, ca),
        ]
        self.plane.kubectl("apply", "--server-side", "-f", "-",
                           input=yaml.safe_dump_all(docs), timeout=120)
        self.plane.wait_established(*(f"crd/{d['metadata']['name']}" for d in docs
                                      if d["kind"] == "CustomResourceDefinition"))
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port,
                        "certDir": str(self.workdir / "certs")},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": True, "webhookServiceName": SERVICE,
                                       "webhookSecretName": SECRET},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": ["batch/job"]},
            "featureGates": {"VisibilityOnDemand": False},
        }
        cfg = self.workdir / "kueue-config.yaml"
        cfg.write_text(yaml.safe_dump(config))
        self.comp = Component("kueue", [
            str(self.folder / "kueue"), f"--config={cfg}",
            f"--kubeconfig={self.plane.kubeconfig}", "--zap-log-level=2",
        ], self.log)
        self.comp.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.comp.running():
                raise PlaneError(f"kueue exited at start:\n{self.comp.tail(60)}")
            if self._ready():
                self.startup_seconds = time.monotonic() - t0
                return
            time.sleep(0.5)
        raise PlaneError(f"kueue not ready after {timeout:.0f} s:\n{self.comp.tail(60)}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.comp is not None:
            self.comp.stop()

    def tail(self, lines: int = 60) -> str:
        return self.comp.tail(lines) if self.comp is not None else "(not started)"
