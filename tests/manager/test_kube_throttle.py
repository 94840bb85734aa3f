"""The Kube client waits out a 429 (the API server's priority and fairness refusing a request)
for its Retry-After, a bounded number of times, and refuses credentials it cannot use.

The real API server answers 429 only under overload, not on demand, so a fake server on a
loopback socket (``ThrottlingServer``) injects it: it answers 429 to the first ``throttled``
requests, then 200."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from loopback import JsonHandler, serving

from specon_manager.kube import RETRY_429, Kube, KubeError
from specon_manager.kube_auth import CredentialError


class ThrottlingServer(ThreadingHTTPServer):
    throttled = 0
    seen = 0
    url = ""


class _Handler(JsonHandler):
    server: ThrottlingServer

    def _answer(self) -> None:
        self.server.seen += 1
        if self.server.seen <= self.server.throttled:
            self.reply(429, b'{"kind":"Status","reason":"TooManyRequests","message":"slow down"}',
                       {"Retry-After": "0"})
        else:
            self.reply(200, b'{"ok":true}')

    do_GET = do_PATCH = _answer


@pytest.fixture
def server() -> Iterator[ThrottlingServer]:
    srv = ThrottlingServer(("127.0.0.1", 0), _Handler)
    with serving(srv) as url:
        srv.url = url
        yield srv


def _url(srv: ThrottlingServer) -> str:
    return srv.url


def test_a_throttled_request_is_sent_again_after_retry_after(server: ThrottlingServer) -> None:
    server.throttled = RETRY_429
    kube = Kube(_url(server), timeout=5.0)
    assert kube.get("/api/v1/nodes/n1") == {"ok": True}
    assert server.seen == RETRY_429 + 1
    kube.close()


def test_a_write_is_fenced_again_before_each_retry(server: ThrottlingServer) -> None:
    server.throttled = 1
    fenced: list[int] = []
    kube = Kube(_url(server), timeout=5.0).fenced(lambda: fenced.append(1))
    kube.patch("/api/v1/nodes/n1", {})
    assert len(fenced) == 2  # the Lease may be gone after the wait
    kube.close()


def test_throttling_that_lasts_is_a_kube_error(server: ThrottlingServer) -> None:
    server.throttled = 100
    kube = Kube(_url(server), timeout=5.0)
    with pytest.raises(KubeError) as exc:
        kube.get("/api/v1/nodes/n1")
    assert exc.value.status == 429 and exc.value.reason == "TooManyRequests"
    assert server.seen == RETRY_429 + 1
    kube.close()


def test_an_auth_provider_user_is_refused_with_the_way_out(tmp_path: Path) -> None:
    doc = {"clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
           "users": [{"name": "u", "user": {"auth-provider": {"name": "gcp"}}}],
           "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
           "current-context": "x"}
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(doc))
    with pytest.raises(CredentialError, match="exec plugin"):
        Kube.from_kubeconfig(tmp_path / "kubeconfig")


def test_a_failing_exec_plugin_is_a_kube_error_not_a_crash(tmp_path: Path) -> None:
    doc = {"clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
           "users": [{"name": "u", "user": {"exec": {
               "apiVersion": "client.authentication.k8s.io/v1", "command": "false"}}}],
           "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
           "current-context": "x"}
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(doc))
    kube = Kube.from_kubeconfig(tmp_path / "kubeconfig")
    with pytest.raises(KubeError, match="exited 1"):
        kube.get("/api/v1/nodes/n1")
    kube.close()
