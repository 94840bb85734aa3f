"""The real job controllers of the Kubeflow plane tests, run against the test plane: the
Kubeflow Training Operator (PyTorchJob only) and JobSet, built by
hack/ecosystem/kubeflow/build.sh, with their CRDs and their admission webhooks.

Webhooks are served, not disabled: each controller serves them over TLS with a certificate
made here (tests/tlslib.py) for ``127.0.0.1``, and they are registered by
``url: https://127.0.0.1:<port>/...``, since the plane's API server cannot reach a Service.

- JobSet has a switch for its own certificate management (``internalCertManagement.enable:
  false`` in its Configuration) and a ``webhook.certDir``: it is given the certificate folder.
  Its JobSet defaulting webhook matters (success policy, startup policy, Indexed completion,
  restartPolicy OnFailure); its pod webhooks (exclusive placement) are registered with the
  upstream objectSelector (only pods of a JobSet).
- The Training Operator v1.8.1 always runs the cert-controller rotator: it reads the Secret
  ``training-operator-webhook-cert`` in ``$MY_POD_NAMESPACE`` (kept when valid for the
  Service's DNS name and 90 days ahead), injects its CA into the ValidatingWebhookConfiguration
  ``validator.training-operator.kubeflow.org``, and waits for the certificate to appear in the
  fixed folder ``/tmp/k8s-webhook-server/serving-certs``, where a kubelet would mount that
  Secret. So the Secret is created beforehand with a certificate valid for both the Service
  name and 127.0.0.1, and the process runs in a mount namespace of its own where the test's
  folder is bound on that path (as a pod's Secret volume): on the host that path is only an
  empty mount point, so another process using it is never given these files, nor we its.

``SPECON_KUBEFLOW_BIN`` (exported by hack/test.d/13-kubeflow.sh) or the build cache names the
binaries; missing ones fail the test unless ``SPECON_SKIP_PLANE=1`` asks to skip (never in
CI), as for the plane itself.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from planelib import Component, Plane, PlaneError, _truthy, free_port
from tlslib import Pair, _openssl

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "hack" / "ecosystem" / "kubeflow" / "build.sh"
BINARIES = ("training-operator", "jobset")
CRDS = {"pytorchjobs.kubeflow.org": "kubeflow.org_pytorchjobs.yaml",
        "jobsets.jobset.x-k8s.io": "jobset.x-k8s.io_jobsets.yaml"}
#: Fixed in training-operator v1.8.1 (pkg/cert/cert.go).
TO_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
TO_SECRET = "training-operator-webhook-cert"
TO_SERVICE = "training-operator"
TO_CA_NAME = "training-operator-ca"
TO_VWC = "validator.training-operator.kubeflow.org"
STARTUP_TIMEOUT = 90.0


def find_bin_dir() -> tuple[Path | None, str]:
    """The controllers' folder, or None and why not."""
    env = os.environ.get("SPECON_KUBEFLOW_BIN")
    if env:
        candidate, origin = Path(env), "SPECON_KUBEFLOW_BIN"
    else:
        try:
            out = subprocess.run(["bash", str(BUILD_SCRIPT), "--print"], capture_output=True,
                                 text=True, check=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"cannot ask {BUILD_SCRIPT.name} for the cache folder: {exc}"
        candidate, origin = Path(out), "the build cache"
    missing = [b for b in BINARIES if not os.access(candidate / b, os.X_OK)]
    missing += [f for f in CRDS.values() if not (candidate / "crds" / f).is_file()]
    if missing:
        return None, (f"Kubeflow controllers missing in {candidate} ({origin}): "
                      f"{', '.join(missing)}; build them with "
                      "`bash hack/ecosystem/kubeflow/build.sh` (needs Go), or set "
                      "SPECON_SKIP_PLANE=1 to skip the tests marked `plane`")
    return candidate, ""


def require_bin_dir() -> Path:
    ci = _truthy("CI")
    if _truthy("SPECON_SKIP_PLANE") and not ci:
        pytest.skip("SPECON_SKIP_PLANE=1: the plane and the Kubeflow controllers were skipped "
                    "on request; CI never skips them")
    bin_dir, why = find_bin_dir()
    if bin_dir is None:
        pytest.fail(why + (" (CI=true: never skipped in CI)" if ci else ""), pytrace=False)
    return bin_dir


#: cert-controller renews a certificate that expires within 90 days: ours outlive that.
DAYS = "3650"


def _ca(folder: Path, name: str) -> Pair:
    """A CA that also bears its name as a DNS name: cert-controller checks its CA by verifying
    it for the name ``CAName``, and renews a CA that fails (its new certificate would not
    name 127.0.0.1)."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=folder)
    # PKCS#1 ("RSA PRIVATE KEY"): cert-controller parses the CA key with ParsePKCS1PrivateKey.
    _openssl("rsa", "-in", f"{name}.key", "-traditional", "-out", f"{name}.key", cwd=folder)
    _openssl("req", "-x509", "-new", "-key", f"{name}.key", "-days", DAYS, "-subj",
             f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,digitalSignature",
             "-addext", f"subjectAltName=DNS:{name}", "-out", f"{name}.crt", cwd=folder)
    return Pair(folder / f"{name}.crt", folder / f"{name}.key")


def _serving(folder: Path, ca: Pair, name: str, sans: tuple[str, ...]) -> Pair:
    """A serving certificate for ``sans`` signed by ``ca``."""
    _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=folder)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", f"/CN={name}", "-out",
             f"{name}.csr", cwd=folder)
    (folder / f"{name}.ext").write_text(
        "extendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"
        f"subjectAltName={','.join(sans)}\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca.cert), "-CAkey", str(ca.key),
             "-CAcreateserial", "-days", DAYS, "-extfile", f"{name}.ext", "-out", f"{name}.crt",
             cwd=folder)
    return Pair(folder / f"{name}.crt", folder / f"{name}.key")


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _webhook(name: str, port: int, path: str, ca: Pair, group: str, version: str,
             resource: str, operations: list[str], selector: dict[str, Any] | None = None,
             ) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "failurePolicy": "Fail", "timeoutSeconds": 10,
        "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": _b64(ca.cert)},
        "rules": [{"apiGroups": [group], "apiVersions": [version], "operations": operations,
                   "resources": [resource]}]}
    if selector:
        hook["objectSelector"] = selector
    return hook


@dataclass
class Kubeflow:
    """The two controllers on ``plane``; see the module docstring."""

    plane: Plane
    bin_dir: Path
    workdir: Path
    tag: str  # makes this instance's namespace and webhook names unique in the session
    components: dict[str, Component] = field(default_factory=dict)
    webhooks: list[str] = field(default_factory=list)  # kind/name, deleted at stop

    @property
    def operator_namespace(self) -> str:
        return f"kubeflow-{self.tag}"

    def start(self) -> None:
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self._crds()
        self._training_operator()
        self._jobset()

    def stop(self) -> None:
        for comp in self.components.values():
            comp.stop()
        for ref in self.webhooks:
            self.plane.kubectl("delete", ref, "--ignore-not-found", check=False)
        self.plane.kubectl("delete", "namespace", self.operator_namespace, "--wait=false",
                           "--ignore-not-found", check=False)

    def log_tails(self, lines: int = 30) -> str:
        return "\n".join(f"--- {n} ({c.log}) ---\n{c.tail(lines)}"
                         for n, c in self.components.items())

    # -- parts ---------------------------------------------------------------------------------
    def _crds(self) -> None:
        # Server-side: the CRDs are larger than the annotation a client-side apply keeps.
        for crd in CRDS.values():
            self.plane.kubectl("apply", "--server-side", "--force-conflicts", "-f",
                               str(self.bin_dir / "crds" / crd))
        self.plane.wait_established(*[f"crd/{name}" for name in CRDS])

    def _apply(self, obj: dict[str, Any]) -> None:
        self.plane.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def _launch(self, name: str, argv: list[str]) -> Component:
        comp = Component(name, argv, self.workdir / "logs" / f"{name}.log")
        self.components[name] = comp
        comp.start()
        return comp

    def _wait_ready(self, name: str, port: int) -> None:
        comp = self.components[name]
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if not comp.running():
                raise PlaneError(f"{name} exited:\n{comp.tail()}")
            try:
                if _http_ready(port):
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise PlaneError(f"{name} not ready after {STARTUP_TIMEOUT:.0f} s:\n{comp.tail()}")

    def _training_operator(self) -> None:
        ns = self.operator_namespace
        certs = self.workdir / "training-operator-certs"
        ca = _ca(certs, TO_CA_NAME)
        serving = _serving(certs, ca, "tls", (f"DNS:{TO_SERVICE}.{ns}.svc", "IP:127.0.0.1"))
        self.plane.kubectl("create", "namespace", ns)
        # The Secret the rotator keeps (valid as it is) and a kubelet would mount.
        self._apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                     "metadata": {"name": TO_SECRET, "namespace": ns},
                     "data": {"ca.crt": _b64(ca.cert), "ca.key": _b64(ca.key),
                              "tls.crt": _b64(serving.cert), "tls.key": _b64(serving.key)}})
        mounted = self.workdir / "training-operator-mount"
        mounted.mkdir(exist_ok=True)
        shutil.copy(serving.cert, mounted / "tls.crt")
        shutil.copy(serving.key, mounted / "tls.key")
        port, probe = free_port(), free_port()
        self._apply({"apiVersion": "admissionregistration.k8s.io/v1",
                     "kind": "ValidatingWebhookConfiguration", "metadata": {"name": TO_VWC},
                     "webhooks": [_webhook(
                         "validator.pytorchjob.training-operator.kubeflow.org", port,
                         "/validate-kubeflow-org-v1-pytorchjob", ca, "kubeflow.org", "v1",
                         "pytorchjobs", ["CREATE", "UPDATE"])]})
        self.webhooks.append(f"validatingwebhookconfiguration/{TO_VWC}")
        binary = self.bin_dir / "training-operator"
        # The Secret's folder bound where the operator looks, in a mount namespace of its own;
        # without root, a user namespace maps us to root in it.
        mapping = [] if os.geteuid() == 0 else ["--map-root-user"]
        script = 'mkdir -p "$1" && mount --bind "$2" "$1" && shift 2 && exec "$@"'
        argv = ["env", f"MY_POD_NAMESPACE={ns}", "unshare", "--mount", "--propagation",
                "private", *mapping, "--", "sh", "-c", script, "sh", TO_CERT_DIR, str(mounted),
                str(binary),
                f"--kubeconfig={self.plane.kubeconfig}", "--enable-scheme=pytorchjob",
                "--metrics-bind-address=0", f"--health-probe-bind-address=127.0.0.1:{probe}",
                f"--webhook-server-port={port}", f"--webhook-service-name={TO_SERVICE}",
                f"--webhook-secret-name={TO_SECRET}", "--zap-log-level=info"]
        self._launch("training-operator", argv)
        self._wait_ready("training-operator", probe)

    def _jobset(self) -> None:
        certs = self.workdir / "jobset-certs"
        ca = _ca(certs, "jobset-ca")
        # tls.crt and tls.key in certDir, as controller-runtime's webhook server reads them.
        _serving(certs, ca, "tls", ("IP:127.0.0.1",))
        port, probe = free_port(), free_port()
        cfg = {"apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
               "leaderElection": {"leaderElect": False},
               "internalCertManagement": {"enable": False},
               "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(certs)},
               "metrics": {"bindAddress": "0"},
               "health": {"healthProbeBindAddress": f"127.0.0.1:{probe}"}}
        cfg_path = self.workdir / "jobset-config.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg))
        name = f"jobset-{self.tag}"
        in_a_jobset = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name",
                                             "operator": "Exists"}]}
        self._apply({"apiVersion": "admissionregistration.k8s.io/v1",
                     "kind": "MutatingWebhookConfiguration", "metadata": {"name": name},
                     "webhooks": [
                         _webhook("mjobset.kb.io", port, "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
                                  ca, "jobset.x-k8s.io", "v1alpha2", "jobsets", ["CREATE"]),
                         _webhook("mpod.kb.io", port, "/mutate--v1-pod", ca, "", "v1", "pods",
                                  ["CREATE"], in_a_jobset)]})
        self.webhooks.append(f"mutatingwebhookconfiguration/{name}")
        self._apply({"apiVersion": "admissionregistration.k8s.io/v1",
                     "kind": "ValidatingWebhookConfiguration", "metadata": {"name": name},
                     "webhooks": [
                         _webhook("vjobset.kb.io", port,
                                  "/validate-jobset-x-k8s-io-v1alpha2-jobset", ca,
                                  "jobset.x-k8s.io", "v1alpha2", "jobsets",
                                  ["CREATE", "UPDATE"]),
                         _webhook("vpod.kb.io", port, "/validate--v1-pod", ca, "", "v1", "pods",
                                  ["CREATE"], in_a_jobset)]})
        self.webhooks.append(f"validatingwebhookconfiguration/{name}")
        argv = [str(self.bin_dir / "jobset"), f"--kubeconfig={self.plane.kubeconfig}",
                f"--config={cfg_path}", "--zap-log-level=info"]
        self._launch("jobset", argv)
        self._wait_ready("jobset", probe)


def _http_ready(port: int) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError:
        return False


@pytest.fixture(scope="module")
def kubeflow(plane: Plane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubeflow]:
    """Both controllers, started once per test module and stopped at its end (their webhook
    registrations and the operator's namespace removed with them; the CRDs stay)."""
    kf = Kubeflow(plane, require_bin_dir(), tmp_path_factory.mktemp("kubeflow"),
                  uuid.uuid4().hex[:6])
    try:
        kf.start()
    except BaseException:
        kf.stop()
        raise
    try:
        yield kf
    finally:
        kf.stop()

