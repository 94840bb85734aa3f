"""The Kube client turns every transport failure into KubeError (issue 15).

An API-server outage raised httpx.ConnectError, which is neither KubeError nor OSError, and
killed the manager's controller thread. These tests use real loopback sockets: a port nobody
listens on, a server that accepts and hangs up, one that never answers, one that answers
non-JSON."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from specon_manager.kube import TRANSPORT, Kube, KubeError


def _serve(behaviour: str) -> Iterator[str]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    stop = threading.Event()
    held: list[socket.socket] = []

    def loop() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            if behaviour == "hangup":
                conn.close()
            elif behaviour == "silent":
                held.append(conn)
            else:  # "html"
                conn.recv(65536)
                body = b"<html>gateway</html>"
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
                conn.close()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()


@pytest.fixture(params=["hangup", "silent", "html"])
def bad_server(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _serve(request.param)


def _closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def test_connection_refused_is_kube_error() -> None:
    kube = Kube(_closed_port(), timeout=2.0)
    with pytest.raises(KubeError) as exc:
        kube.get("/api/v1/nodes/n1")
    assert exc.value.status == TRANSPORT
    assert "ConnectError" in str(exc.value)
    kube.close()


def test_every_verb_wraps_transport_errors(bad_server: str) -> None:
    kube = Kube(bad_server, timeout=0.5)
    calls = [lambda: kube.get("/api/v1/nodes/n1"),
             lambda: kube.list("/api/v1/pods"),
             lambda: kube.create("/api/v1/namespaces/d/pods", {}),
             lambda: kube.patch("/api/v1/nodes/n1", {}),
             lambda: kube.put("/api/v1/nodes/n1", {}),
             lambda: kube.delete("/api/v1/namespaces/d/pods/p")]
    for call in calls:
        with pytest.raises(KubeError) as exc:
            call()
        assert exc.value.status == TRANSPORT
    kube.close()
