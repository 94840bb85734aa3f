"""A small Kubernetes REST client (httpx, JSON dicts): the manager's only door to the API.

Objects are the API's own JSON (camelCase keys), the same shape the extender receives, so one
set of helpers reads both. Configured from a kubeconfig (a token, a token file, an ``exec``
credential plugin or a client certificate) or from the pod's service account, whose projected
token is read again as the kubelet rotates it (specon_manager/kube_auth.py). A 401 is retried
once with a fresh token, a 429 after its ``Retry-After`` (bounded)."""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from specon.kube_events import INSTANCE_CHARS, NOTE_BYTES
from specon.kube_events import event_body as kube_event_body
from specon.kube_events import events_path as events_path  # the manager's modules use it
from specon.retry_after import RETRY_429 as RETRY_429  # the tests and callers read it here
from specon.retry_after import retry_after_s

from .kube_auth import CredentialError, ExecPlugin, StaticToken, TokenFile, TokenSource
from .rate_limit import TokenBucket

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TRANSPORT = 0  # KubeError.status of a request that got no usable HTTP answer
FENCED = 1  # KubeError.status of a write refused here: this replica no longer holds the Lease
Items = list[dict[str, Any]]  # a list's items (the name ``list`` is a method inside Kube)


class KubeError(Exception):
    """The API server refused a request: ``status`` is the HTTP status, ``reason`` its reason.

    A request that never got an answer (connection refused or reset, a timeout, a broken or
    non-JSON reply) is a KubeError too, with ``status`` 0 (TRANSPORT): callers catch one type,
    so an API-server outage cannot escape a loop that only expected refusals."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason


def _data_file(data: str, suffix: str) -> str:
    f = tempfile.NamedTemporaryFile("wb", suffix=suffix, delete=False)  # noqa: SIM115
    with f:
        f.write(base64.b64decode(data))
    return f.name


class Kube:
    def __init__(self, server: str, token: str | TokenSource | None = None,
                 ca_file: str | None = None, cert: tuple[str, str] | None = None,
                 timeout: float = 15.0, tls_server_name: str | None = None,
                 proxy: str | None = None, insecure: bool = False) -> None:
        ctx: ssl.SSLContext | bool = (ssl.create_default_context(cafile=ca_file) if ca_file
                                      else not insecure)
        if cert is not None:
            if not isinstance(ctx, ssl.SSLContext):
                ctx = ssl.create_default_context()
            ctx.load_cert_chain(*cert)
        self.server = server.rstrip("/")
        self.auth: TokenSource = (token if token is not None and not isinstance(token, str)
                                  else StaticToken(token))
        # kubeconfig's tls-server-name: the name sent in SNI and checked in the certificate.
        self._extensions = {"sni_hostname": tls_server_name} if tls_server_name else None
        self._http = httpx.Client(base_url=self.server, verify=ctx, proxy=proxy,
                                  headers={"Accept": "application/json"}, timeout=timeout)
        #: Called before every write (POST, PUT, PATCH, DELETE); raises to refuse it.
        self.fence: Callable[[], None] | None = None
        #: Seconds a request may take (None: the client's ``timeout``).
        self.timeout: float | None = None
        #: Every request (each retry and each watch too) first takes a token here; None: no
        #: client-side limit. Shared by :meth:`fenced` and :meth:`with_timeout` copies.
        self.rate: TokenBucket | None = None
        #: The watches open now (shared by the copies, as the pool is): :meth:`close` ends
        #: them before it closes their sockets.
        self._watches = _OpenWatches()

    def fenced(self, fence: Callable[[], None]) -> Kube:
        """This client (the same connection pool) with every write first passed through
        ``fence``, which raises :class:`KubeError` (status :data:`FENCED`) to refuse it: the
        migration controller's writes, each checked against the leader Lease."""
        out = copy.copy(self)
        out.fence = fence
        return out

    def with_timeout(self, seconds: float) -> Kube:
        """This client (the same connection pool) with requests bounded by ``seconds``: the
        Lease's renewals, which are worth nothing once the renew deadline has passed."""
        out = copy.copy(self)
        out.timeout = seconds
        return out

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_kubeconfig(cls, path: Path | str) -> Kube:
        path = Path(path)
        doc = yaml.safe_load(path.read_text())
        ctx_name = doc.get("current-context")
        ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in doc["users"] if u["name"] == ctx["user"]) or {}
        base = path.resolve().parent

        def local(name: str | None) -> str | None:
            # Relative paths in a kubeconfig are relative to its folder, as kubectl reads them.
            return str(base / name) if name else None

        ca = local(cluster.get("certificate-authority"))
        if cluster.get("certificate-authority-data"):
            ca = _data_file(cluster["certificate-authority-data"], ".crt")
        cert = None
        if user.get("client-certificate-data"):
            cert = (_data_file(user["client-certificate-data"], ".crt"),
                    _data_file(user["client-key-data"], ".key"))
        elif user.get("client-certificate"):
            cert = (str(local(user["client-certificate"])), str(local(user["client-key"])))
        token: str | TokenSource | None = user.get("token")
        if user.get("exec"):
            token = ExecPlugin(user["exec"], base, cluster={
                k: v for k, v in (("server", cluster["server"]),
                                  ("tls-server-name", cluster.get("tls-server-name")),
                                  ("certificate-authority-data",
                                   cluster.get("certificate-authority-data"))) if v})
        elif user.get("auth-provider"):
            raise CredentialError(
                f"kubeconfig {path}: auth-provider users are not supported (kubectl dropped "
                "them in 1.26): use the provider's exec plugin (gke-gcloud-auth-plugin, "
                "kubelogin, aws eks get-token)")
        elif not token and user.get("tokenFile"):
            token = TokenFile(str(local(user["tokenFile"])))
        return cls(cluster["server"], token=token, ca_file=ca, cert=cert,
                   tls_server_name=cluster.get("tls-server-name"),
                   proxy=cluster.get("proxy-url"),
                   insecure=bool(cluster.get("insecure-skip-tls-verify")))

    @classmethod
    def in_cluster(cls) -> Kube:
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        # The projected token is rotated by the kubelet: read it again, never keep it.
        return cls(f"https://{host}:{port}", token=TokenFile(SA_DIR / "token"),
                   ca_file=str(SA_DIR / "ca.crt"))

    def close(self) -> None:
        """Close the connection pool, first ending every watch still open (a thread blocked
        reading a watch while its socket is closed under it may read from whatever socket gets
        that descriptor next: the plane tests saw TLS records of two connections mixed)."""
        self._watches.end_all()
        self._http.close()

    # -- verbs ---------------------------------------------------------------------------------
    def _auth_headers(self, verb: str, path: str) -> dict[str, str]:
        """The Authorization header with the token as it is now (none without a token)."""
        try:
            token = self.auth.token()
        except CredentialError as exc:
            raise KubeError(TRANSPORT, "NoCredentials", f"{verb} {path}: {exc}") from exc
        return {"Authorization": f"Bearer {token}"} if token else {}

    @staticmethod
    def _refusal(resp: httpx.Response) -> KubeError:
        """The error for an answer of 400 or more, with the API's Status reason when it sent one."""
        try:
            status = resp.json()
            return KubeError(resp.status_code, status.get("reason", ""),
                             status.get("message", resp.text))
        except ValueError:
            return KubeError(resp.status_code, "", resp.text)

    def _send(self, method: str, path: str, body: Any, headers: dict[str, str],
              params: dict[str, str] | None) -> httpx.Response:
        headers = {**headers, **self._auth_headers(method, path)}
        if self.rate is not None:
            self.rate.take()
        try:
            return self._http.request(
                method, path, json=body, headers=headers, params=params,
                extensions=self._extensions,
                timeout=self.timeout if self.timeout is not None else httpx.USE_CLIENT_DEFAULT)
        except httpx.HTTPError as exc:  # ConnectError, timeouts, protocol errors, ...
            raise KubeError(TRANSPORT, type(exc).__name__, f"{method} {path}: {exc}") from exc

    def _call(self, method: str, path: str, body: Any = None, content_type: str | None = None,
              params: dict[str, str] | None = None) -> Any:
        headers = {"Content-Type": content_type} if content_type else {}
        retried_401, waits = False, 0
        while True:
            if method != "GET" and self.fence is not None:
                self.fence()  # again before a retry: the Lease may have gone while we waited
            resp = self._send(method, path, body, headers, params)
            if resp.status_code == 401 and not retried_401 and self.auth.expire():
                retried_401 = True  # a rotated token file, an exec plugin's renewed token
                continue
            if resp.status_code == 429 and waits < RETRY_429:
                waits += 1
                # At most a deadline-bound client's own timeout (specon/retry_after.py).
                time.sleep(retry_after_s(resp.headers.get("Retry-After"), self.timeout))
                continue
            break
        if resp.status_code >= 400:
            raise self._refusal(resp)
        if not resp.content:
            return None
        try:
            return resp.json()
        except ValueError as exc:
            raise KubeError(TRANSPORT, "BadBody",
                            f"{method} {path}: reply is not JSON: {exc}") from exc

    def get(self, path: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        try:
            out: dict[str, Any] = self._call("GET", path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return out

    def list(self, path: str, **params: str) -> list[dict[str, Any]]:
        return self.list_with_version(path, **params)[0]

    def list_with_version(self, path: str, **params: str) -> tuple[Items, str]:
        """The items and the list's ``resourceVersion`` (where a watch goes on from)."""
        out = self._call("GET", path, params=params or None)
        return out["items"], str((out.get("metadata") or {}).get("resourceVersion") or "")

    def watch(self, path: str, resource_version: str, timeout_s: int = 300,
              on_open: Callable[[], None] | None = None,
              **params: str) -> Iterator[dict[str, Any]]:
        """The watch events (``{"type": ..., "object": ...}``) on ``path`` after
        ``resource_version``, with bookmarks, until the API server ends the watch (after about
        ``timeout_s``). ``on_open`` is called once the API server has accepted the watch. A
        refusal is a :class:`KubeError`, and so is a broken stream; an ``ERROR`` event (410
        Gone: the version is too old) is yielded as it comes."""
        query = {**params, "watch": "1", "resourceVersion": resource_version,
                 "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_s)}
        headers = self._auth_headers("WATCH", path)
        if self.rate is not None:
            self.rate.take()
        # Events may be minutes apart: only the server's own end of the watch bounds a read.
        timeout = httpx.Timeout(self._http.timeout.connect or 15.0, read=timeout_s + 30.0)
        try:
            with self._http.stream("GET", path, params=query, headers=headers,
                                   extensions=self._extensions, timeout=timeout) as resp:
                if resp.status_code >= 400:
                    if resp.status_code == 401:
                        self.auth.expire()  # the next watch goes with a fresh token
                    resp.read()
                    raise self._refusal(resp)
                if on_open is not None:
                    on_open()
                with self._watches.open(resp):
                    for line in resp.iter_lines():
                        if line.strip():
                            yield json.loads(line)
        except httpx.HTTPError as exc:
            raise KubeError(TRANSPORT, type(exc).__name__, f"WATCH {path}: {exc}") from exc
        except ValueError as exc:
            raise KubeError(TRANSPORT, "BadBody", f"WATCH {path}: not JSON: {exc}") from exc

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self._call("POST", path, body)
        return out

    def patch(self, path: str, body: Any, kind: str = "merge") -> dict[str, Any]:
        ctype = {"merge": "application/merge-patch+json",
                 "strategic": "application/strategic-merge-patch+json",
                 "json": "application/json-patch+json"}[kind]
        out: dict[str, Any] = self._call("PATCH", path, body, content_type=ctype)
        return out

    def delete(self, path: str, body: dict[str, Any] | None = None) -> None:
        try:
            self._call("DELETE", path, body)
        except KubeError as exc:
            if exc.status != 404:
                raise

    def put(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self._call("PUT", path, body)
        return out


def pod_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/pods"
    return f"{base}/{name}" if name else base


def job_path(namespace: str, name: str = "") -> str:
    return owner_path("Job", namespace, name)


#: The controllers whose pods may be migrated, with the API group/version and resource of each
#: (docs/manager.md, "Which pods move"). The migration's record lives on them.
OWNERS = {"Job": ("batch/v1", "jobs"), "StatefulSet": ("apps/v1", "statefulsets"),
          "ReplicaSet": ("apps/v1", "replicasets"),
          "PyTorchJob": ("kubeflow.org/v1", "pytorchjobs")}
#: The controllers of an owner whose shape decides too (a JobSet's Jobs): read, never written.
PARENTS = {"JobSet": ("jobset.x-k8s.io/v1alpha2", "jobsets")}
#: Kinds of custom resources: a cluster may lack them (404) or the manager the right to list
#: them (403), which must not stop it.
CUSTOM_KINDS = frozenset({"PyTorchJob", "JobSet"})


def owner_path(kind: str, namespace: str = "", name: str = "") -> str:
    """The path of a controller of kind ``kind`` (a key of :data:`OWNERS` or :data:`PARENTS`);
    no namespace: the cluster-wide list."""
    group, resource = OWNERS[kind] if kind in OWNERS else PARENTS[kind]
    base = f"/apis/{group}" + (f"/namespaces/{namespace}" if namespace else "") + f"/{resource}"
    return f"{base}/{name}" if name else base


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = obj.get("metadata") or {}
    return out


def annotations_of(obj: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = meta(obj).get("annotations") or {}
    return out


def labels_of(obj: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = meta(obj).get("labels") or {}
    return out


def controller_ref(obj: dict[str, Any]) -> dict[str, Any] | None:
    for ref in meta(obj).get("ownerReferences") or ():
        if ref.get("controller"):
            out: dict[str, Any] = ref
            return out
    return None


#: The manager as its Events' ``reportingController`` (a qualified name, as the API requires).
EVENT_CONTROLLER = "specon-manager"
EVENT_NOTE_BYTES = NOTE_BYTES
EVENT_INSTANCE_CHARS = INSTANCE_CHARS


def event_instance() -> str:
    """This replica, as its Events' ``reportingInstance``: the pod's name (the chart sets
    ``POD_NAME``), else the host name."""
    name = os.environ.get("POD_NAME") or socket.gethostname() or EVENT_CONTROLLER
    return name[:EVENT_INSTANCE_CHARS]


def event_body(obj: dict[str, Any], reason: str, message: str, *, action: str,
               kind: str = "Pod", warning: bool = False) -> dict[str, Any]:
    """An Event about ``obj`` from the manager (specon.kube_events.event_body, with
    ``reportingController`` specon-manager and this replica as ``reportingInstance``)."""
    return kube_event_body(obj, reason, message, action=action, controller=EVENT_CONTROLLER,
                           instance=event_instance(), kind=kind, warning=warning)


class _OpenWatches:
    """The sockets of the watches open now, so that closing the client first shuts them (which
    wakes a thread blocked reading one) and waits a moment for their readers to let go."""

    WAIT_S = 2.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, tuple[socket.socket | None, threading.Event]] = {}

    def open(self, resp: httpx.Response) -> _Registration:
        stream = resp.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        return _Registration(self, sock if isinstance(sock, socket.socket) else None)

    def add(self, key: int, sock: socket.socket | None, done: threading.Event) -> None:
        with self._lock:
            self._open[key] = (sock, done)

    def remove(self, key: int) -> None:
        with self._lock:
            self._open.pop(key, None)

    def end_all(self) -> None:
        with self._lock:
            open_now = list(self._open.values())
        for sock, _ in open_now:
            if sock is not None:
                # the plain socket's shutdown: an SSLSocket's own drops its TLS state
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
        deadline = time.monotonic() + self.WAIT_S
        for _, done in open_now:
            done.wait(max(0.0, deadline - time.monotonic()))


class _Registration:
    def __init__(self, owner: _OpenWatches, sock: socket.socket | None) -> None:
        self.owner, self.sock, self.done = owner, sock, threading.Event()

    def __enter__(self) -> None:
        self.owner.add(id(self), self.sock, self.done)

    def __exit__(self, *exc: object) -> None:
        self.owner.remove(id(self))
        self.done.set()
