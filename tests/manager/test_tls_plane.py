"""TLS on the real plane (issue 14): the real manager process under uvicorn serves the agents
over HTTPS and the extender on a port of its own that completes a TLS handshake only with a
client certificate its CA signed; the real kube-scheduler, with the extender's ``tlsConfig``,
places a training pod through it. Without a client certificate (or with one from another CA)
nobody reaches ``/filter``: not a client, not a kube-scheduler (its pod is left unscheduled
with the extender's error in a FailedScheduling event); the main port does not serve the
extender at all, and plain HTTP gets nothing."""

from __future__ import annotations

import ssl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from planelib import Plane, free_port
from planemanager import Api, ManagerProcess, apply, running_on, train_pod, wait_for
from tlslib import Pair, issue, make_ca

from specon.wire import HeartbeatReply
from specon_agent.link import ManagerLink

pytestmark = pytest.mark.plane

TOKEN = f"tls-agent-{uuid.uuid4().hex}"


@dataclass
class Tls:
    ca: Pair
    server: Pair
    scheduler: Pair
    stranger: Pair  # a client certificate from another CA


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    d = tmp_path_factory.mktemp("tls")
    ca = make_ca(d, "specon-ca")
    other = make_ca(d, "other-ca")
    return Tls(ca, issue(d, ca, "manager", "specon-manager", ("IP:127.0.0.1", "DNS:localhost")),
               issue(d, ca, "scheduler", "specon-scheduler", client=True),
               issue(d, other, "stranger", "specon-scheduler", client=True))


@dataclass
class Setup:
    nodes: list[str]
    tag: str
    manager: ManagerProcess
    extender_url: str


@pytest.fixture
def setup(plane: Plane, tls: Tls, tmp_path: Path) -> Iterator[Setup]:
    tag = f"tls{uuid.uuid4().hex[:6]}"
    nodes = plane.add_nodes(2, prefix=tag, labels={"specon-test": tag})
    ext_port = free_port()
    manager = ManagerProcess(
        plane, tmp_path, {TOKEN: nodes[0]}, ca_file=tls.ca.cert, migration=False,
        scheduler_name=f"specon-{tag}", tls_cert_file=tls.server.cert,
        tls_key_file=tls.server.key, extender_port=ext_port,
        extender_client_ca_file=tls.ca.cert)
    manager.start()
    try:
        yield Setup(nodes, tag, manager, f"https://127.0.0.1:{ext_port}")
    finally:
        manager.kill()
        for node in nodes:
            plane.delete_node(node)


def extender(url: str, ca: Pair, cert: Pair | None, tls_config: bool = True) -> dict[str, Any]:
    cfg: dict[str, Any] = {"urlPrefix": url, "filterVerb": "filter",
                           "prioritizeVerb": "prioritize", "weight": 10,
                           "nodeCacheCapable": True, "ignorable": False, "httpTimeout": "5s",
                           "enableHTTPS": True}
    if tls_config:
        cfg["tlsConfig"] = {"caFile": str(ca.cert)}
        if cert is not None:
            cfg["tlsConfig"].update(certFile=str(cert.cert), keyFile=str(cert.key))
    return cfg


def client(ca: Pair, cert: Pair | None) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(ca.cert))
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    return httpx.Client(verify=ctx, timeout=5)


def filter_body(nodes: list[str]) -> dict[str, Any]:
    return {"Pod": {"metadata": {"name": "p", "namespace": "default", "uid": "u"},
                    "spec": {}}, "NodeNames": nodes}


def metric_line(text: str, prefix: str) -> float:
    for ln in text.splitlines():
        if ln.startswith(prefix):
            return float(ln.split()[-1])
    return 0.0


def test_the_real_scheduler_calls_the_extender_over_mutual_tls(
        plane: Plane, plane_namespace: str, tls: Tls, setup: Setup) -> None:
    s, ns = setup, plane_namespace
    sched = f"specon-{s.tag}"
    api = Api(plane)
    plane.run_scheduler(sched, extenders=[extender(s.extender_url, tls.ca, tls.scheduler)])
    try:
        apply(plane, ns, train_pod("placed", s.tag, sched))
        node = wait_for("the pod placed through the extender",
                        lambda: running_on(api, ns, "placed"), timeout=60)
        assert node in s.nodes
    finally:
        plane.stop_scheduler(sched)
        api.close()
    with client(tls.ca, None) as c:
        text = c.get(f"{s.manager.url}/metrics").text
    ok = 'specon_manager_extender_requests_total{result="ok",verb="filter"}'
    assert metric_line(text, ok) >= 1


def test_without_the_client_certificate_nobody_reaches_the_extender(
        plane: Plane, plane_namespace: str, tls: Tls, setup: Setup) -> None:
    s, ns = setup, plane_namespace
    body = filter_body(s.nodes)
    with client(tls.ca, tls.scheduler) as c:  # the scheduler's certificate: answered
        assert c.post(f"{s.extender_url}/filter", json=body).status_code == 200
        # the extender port serves nothing else
        assert c.get(f"{s.extender_url}/metrics").status_code == 404
    for who in (None, tls.stranger):  # no certificate, or one another CA signed
        with client(tls.ca, who) as c, pytest.raises(httpx.TransportError):
            c.post(f"{s.extender_url}/filter", json=body)
    with client(tls.ca, None) as c:  # the main port does not serve the extender
        assert c.post(f"{s.manager.url}/filter", json=body).status_code == 404
    # plain HTTP gets no answer from either port
    for url in (s.manager.url, s.extender_url):
        with pytest.raises(httpx.TransportError):
            httpx.post(url.replace("https://", "http://") + "/filter", json=body, timeout=5)
    # A kube-scheduler without the client certificate cannot place training pods.
    sched = f"specon-{s.tag}"
    api = Api(plane)
    plane.run_scheduler(sched, extenders=[extender(s.extender_url, tls.ca, None)])
    try:
        apply(plane, ns, train_pod("refused", s.tag, sched))

        def failed() -> list[str]:
            items = (api.get(f"/api/v1/namespaces/{ns}/events") or {})["items"]
            return [e["message"] for e in items if e["reason"] == "FailedScheduling"
                    and e["involvedObject"]["name"] == "refused"]

        messages = wait_for("a FailedScheduling event", failed, timeout=60)
        # the extender's call failed in the handshake (TLS 1.3: the client sees EOF)
        assert any(f"{s.extender_url}/filter" in m for m in messages), messages
        pod = api.pod(ns, "refused")
        assert pod is not None and not pod["spec"].get("nodeName")
    finally:
        plane.stop_scheduler(sched)
        api.close()


def test_agents_send_heartbeats_over_tls_verified_against_the_ca(
        tls: Tls, setup: Setup, tmp_path: Path) -> None:
    s = setup
    token = tmp_path / "token"
    token.write_text(TOKEN)
    replies: list[HeartbeatReply] = []
    outcomes: list[tuple[str, str]] = []
    from specon.wire import Heartbeat

    link = ManagerLink(s.manager.url, token, interval_s=0.2, ca_file=tls.ca.cert,
                       on_reply=replies.append, on_outcome=lambda k, o: outcomes.append((k, o)))
    link.offer_heartbeat(Heartbeat(node=s.nodes[0], time=time.time(), seq=1, capacity_cpus=4,
                                   load_cores=0.0, jobs=[]))
    link.start()
    try:
        wait_for("a heartbeat accepted over TLS", lambda: replies, timeout=20)
    finally:
        link.stop()
    assert replies[0].accepted
    # An agent that does not know the CA refuses the manager's certificate.
    bad = ManagerLink(s.manager.url, token, interval_s=0.2,
                      on_outcome=lambda k, o: outcomes.append((k, o)))
    bad.offer_heartbeat(Heartbeat(node=s.nodes[0], time=time.time(), seq=2, capacity_cpus=4,
                                  load_cores=0.0, jobs=[]))
    bad.start()
    try:
        wait_for("the untrusted certificate refused",
                 lambda: ("heartbeat", "unreachable") in outcomes, timeout=20)
    finally:
        bad.stop()
