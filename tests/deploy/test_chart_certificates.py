"""Issue 29, item 6, on the real manager process with the chart's own certificates: the
certificates ``helm template`` generates (tls.mode generate) are written out and
``python -m specon_manager`` is started with the environment the chart's Deployment gives it.
Both the serving certificate and the scheduler's client certificate are signed by the chart's
CA, and Helm's ``genSignedCert`` gives every certificate the clientAuth usage, so before the
fix the manager's own serving certificate (held by the manager pod, readable by whoever can
read its Secret) was accepted on the extender port like kube-scheduler's. Now the extender port
accepts only a client certificate named as the scheduler, and refuses the serving one right
after the handshake with a log line naming it."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from deploylib import docs, one, pod_spec, render
from planelib import free_port
from servelib import stop_process

pytestmark = pytest.mark.plane

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "specon-system"
SERVER_NAME = f"specon-manager.{NAMESPACE}.svc"  # a name of the serving certificate


@dataclass
class Pair:
    cert: Path
    key: Path


@dataclass
class Running:
    port: int
    extender_port: int
    ca: Path
    serving: Pair
    scheduler: Pair
    log: Path


def secret_files(objs: list[dict[str, Any]], name: str, folder: Path) -> Pair:
    data = one(objs, "Secret", name)["data"]
    for key in ("tls.crt", "tls.key", "ca.crt"):
        (folder / f"{name}-{key}").write_bytes(base64.b64decode(data[key]))
    return Pair(folder / f"{name}-tls.crt", folder / f"{name}-tls.key")


@pytest.fixture(scope="module")
def running(plane_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    d = tmp_path_factory.mktemp("chart-certs")
    objs = docs(render(plane_bin, d / "helm", namespace=NAMESPACE))
    serving = secret_files(objs, "specon-manager-tls", d)
    scheduler = secret_files(objs, "specon-scheduler-tls", d)
    ca = d / "specon-manager-tls-ca.crt"
    chart_env = {e["name"]: e.get("value", "") for e in
                 pod_spec(one(objs, "Deployment", "specon-manager"))["containers"][0]["env"]}
    tokens = d / "tokens"
    tokens.write_text("t" * 40 + " node-1\n")
    port, ext = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPECON_MANAGER_KUBERNETES": "false",
           "SPECON_MANAGER_HOST": "127.0.0.1", "SPECON_MANAGER_PORT": str(port),
           "SPECON_MANAGER_TOKENS_FILE": str(tokens), "SPECON_MANAGER_LOG_LEVEL": "info",
           "SPECON_MANAGER_TLS_CERT_FILE": str(serving.cert),
           "SPECON_MANAGER_TLS_KEY_FILE": str(serving.key),
           "SPECON_MANAGER_EXTENDER_PORT": str(ext),
           # the chart mounts the manager Secret's ca.crt as the extender's client CA
           "SPECON_MANAGER_EXTENDER_CLIENT_CA_FILE": chart_env[
               "SPECON_MANAGER_EXTENDER_CLIENT_CA_FILE"].replace("/etc/specon/tls/", str(d)
                                                                 + "/specon-manager-tls-")}
    # and whatever else the chart says about the extender's clients
    env.update({k: v for k, v in chart_env.items()
                if k.startswith("SPECON_MANAGER_EXTENDER_CLIENT_") and k not in env})
    log = d / "manager.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "specon_manager"], env=env, cwd=REPO,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while call(port, ca, None, "GET", "/healthz") != 200:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "manager did not start"
            time.sleep(0.2)
        yield Running(port, ext, ca, serving, scheduler, log)
    finally:
        stop_process(proc)


def call(port: int, ca: Path, cert: Pair | None, method: str, path: str,
         body: dict[str, Any] | None = None) -> int | None:
    """One HTTPS request to 127.0.0.1:``port`` verified as the manager's Service name,
    presenting ``cert``; its status, or None when the connection gave no answer."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    raw = json.dumps(body).encode() if body is not None else b""
    req = (f"{method} {path} HTTP/1.1\r\nHost: {SERVER_NAME}\r\nConnection: close\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n").encode()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock, \
                ctx.wrap_socket(sock, server_hostname=SERVER_NAME) as tls:
            tls.sendall(req + raw)
            data = b""
            while chunk := tls.recv(65536):
                data += chunk
    except (ssl.SSLError, OSError):
        return None
    if not data.startswith(b"HTTP/1.1 "):
        return None
    return int(data.split(b" ", 2)[1])


FILTER = {"Pod": {"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": {}},
          "NodeNames": ["node-1"]}


def test_the_chart_s_serving_certificate_is_refused_on_the_extender_port(
        running: Running) -> None:
    r = running
    # kube-scheduler's certificate: answered
    assert call(r.extender_port, r.ca, r.scheduler, "POST", "/filter", FILTER) == 200
    # the manager's own serving certificate, signed by the same CA: no answer, and said so
    assert call(r.extender_port, r.ca, r.serving, "POST", "/filter", FILTER) is None
    assert call(r.extender_port, r.ca, r.serving, "GET", "/healthz") is None
    deadline = time.monotonic() + 5
    while "refused the client certificate" not in r.log.read_text():
        assert time.monotonic() < deadline, r.log.read_text()
        time.sleep(0.1)
    line = next(ln for ln in r.log.read_text().splitlines()
                if "refused the client certificate" in ln)
    assert "specon-manager" in line and "specon-scheduler" in line, line
    # no certificate at all: the handshake fails, as before
    assert call(r.extender_port, r.ca, None, "POST", "/filter", FILTER) is None
    # the scheduler's certificate still works after the refusals, and the main port is as it was
    assert call(r.extender_port, r.ca, r.scheduler, "POST", "/filter", FILTER) == 200
    assert call(r.port, r.ca, None, "GET", "/healthz") == 200
