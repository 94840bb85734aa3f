"""The agents' API under a real uvicorn: authentication, validation, body limits, bursts."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from managerlib import TOKENS, Standby, auth, heartbeat, job, serve

from specon import defaults
from specon_manager.app import create_app
from specon_manager.auth import NodeTokens, TokenError
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState

CLUSTER_NODES = {f"node-{i}" for i in range(200)}


@pytest.fixture
def manager() -> Iterator[tuple[str, Any]]:
    settings = ManagerSettings(kubernetes=False, heartbeat_interval_s=10)
    app = create_app(settings, tokens=NodeTokens(TOKENS),
                     node_exists=lambda n: n in CLUSTER_NODES)
    with serve(app) as url:
        yield url, app


def test_heartbeat_is_accepted_and_answered_with_the_parameters(manager: Any) -> None:
    url, app = manager
    r = httpx.post(f"{url}/v1/heartbeat", headers=auth("node-1"),
                   json=heartbeat("node-1", [job("a", "PC"), job("b", "CC")], load=1.0))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["accepted"] is True
    assert body["parameters"]["alpha"] == pytest.approx(defaults.ALPHA)
    assert body["checkpoint_requests"] == []
    state: ClusterState = app.state.cluster
    assert state.fresh_nodes() == ["node-1"]
    view = state.views(["node-1"])[0]
    assert (view.progressing, view.converged, view.load) == (1, 1, 0.25)


@pytest.mark.parametrize("headers, detail", [
    ({}, "missing bearer token"),
    ({"Authorization": "Basic abc"}, "missing bearer token"),
    ({"Authorization": "Bearer not-a-token-of-any-node"}, "unknown token"),
])
def test_bad_token_is_refused_with_401(manager: Any, headers: dict[str, str], detail: str) -> None:
    url, app = manager
    r = httpx.post(f"{url}/v1/heartbeat", headers=headers, json=heartbeat("node-1"))
    assert r.status_code == 401
    assert r.json()["detail"] == detail
    assert app.state.cluster.nodes() == []


def test_a_token_cannot_speak_for_another_node(manager: Any) -> None:
    url, app = manager
    r = httpx.post(f"{url}/v1/heartbeat", headers=auth("node-1"), json=heartbeat("node-2"))
    assert r.status_code == 403
    assert "node-1" in r.json()["detail"] and "node-2" in r.json()["detail"]
    r = httpx.post(f"{url}/v1/reallocate", headers=auth("node-1"), json={
        "node": "node-2", "namespace": "default", "pod": "a", "time": 1.0})
    assert r.status_code == 403
    assert app.state.cluster.nodes() == []


def test_heartbeat_for_a_node_the_cluster_does_not_have_is_refused() -> None:
    tokens = NodeTokens({"token-for-a-ghost-node-xxxxx": "ghost"})
    app = create_app(ManagerSettings(kubernetes=False), tokens=tokens,
                     node_exists=lambda n: n in CLUSTER_NODES)
    with serve(app) as url2:
        r = httpx.post(f"{url2}/v1/heartbeat",
                       headers={"Authorization": "Bearer token-for-a-ghost-node-xxxxx"},
                       json=heartbeat("ghost"))
    assert r.status_code == 422
    assert "not a node of this cluster" in r.json()["detail"]


@pytest.mark.parametrize("patch, field", [
    ({"load_cores": -1.0}, "load_cores"),
    ({"capacity_cpus": 0}, "capacity_cpus"),
    ({"time": float("nan")}, "time"),
    ({"load_cores": float("inf")}, "load_cores"),
    ({"jobs": [job("a", "PC", cpu_cores=-2)]}, "cpu_cores"),
    ({"jobs": [job("a", "PC", loss=float("nan"))]}, "loss"),
    ({"jobs": [job("a", "XX")]}, "category"),
    ({"protocol": "specon/v2"}, "protocol"),  # unknown keys are ignored (test_wire_compat)
])
def test_nonsense_heartbeat_values_get_a_clear_422(manager: Any, patch: dict[str, Any],
                                                   field: str) -> None:
    url, app = manager
    body = {**heartbeat("node-1"), **patch}
    # json.dumps writes NaN/Infinity (not JSON, but what a careless client sends).
    r = httpx.post(f"{url}/v1/heartbeat", headers={**auth("node-1"),
                   "Content-Type": "application/json"}, content=json.dumps(body))
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(field in [str(x) for x in d["loc"]] for d in detail), detail
    assert app.state.cluster.nodes() == []


def _raw_post(url: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        s.sendall(head.encode() + body)
        data = b""
        while True:  # the server closes the connection after its answer
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        status = int(data.split(b" ", 2)[1])
        return status, data


def test_100_mb_body_is_refused_before_it_is_sent(manager: Any) -> None:
    url, app = manager
    # Only the headers go out: the answer comes without the server waiting for 100 MB.
    status, data = _raw_post(url, "/v1/heartbeat", {**auth("node-1"),
                             "Content-Type": "application/json",
                             "Content-Length": str(100 * 1024 * 1024)}, b"{")
    assert status == 413
    assert b"over the limit" in data
    # The manager keeps serving.
    r = httpx.post(f"{url}/v1/heartbeat", headers=auth("node-1"), json=heartbeat("node-1"))
    assert r.status_code == 200
    assert app.state.metrics.bodies_refused._value.get() == 1


def test_streamed_body_over_the_limit_is_refused(manager: Any) -> None:
    url, _ = manager

    def chunks() -> Iterator[bytes]:
        yield b'{"node": "node-1", "pad": "'
        for _ in range(100):  # 100 x 64 KiB = 6.4 MiB > 2 MiB
            yield b"x" * 65536
        yield b'"}'

    try:
        r = httpx.post(f"{url}/v1/heartbeat", headers=auth("node-1"), content=chunks())
    except httpx.TransportError:
        pytest.fail("the server dropped the connection instead of answering 413")
    assert r.status_code == 413


def test_garbage_body_is_refused_not_a_crash(manager: Any) -> None:
    url, _ = manager
    r = httpx.post(f"{url}/v1/heartbeat", headers={**auth("node-1"),
                   "Content-Type": "application/json"}, content=b"\xff\xfe{{{")
    assert r.status_code in (400, 422)
    r = httpx.post(f"{url}/v1/heartbeat", headers=auth("node-1"), json=[1, 2, 3])
    assert r.status_code == 422


def test_a_burst_of_1000_heartbeats_is_absorbed_while_the_extender_serves(
    manager: Any
) -> None:
    url, app = manager
    nodes = [f"node-{i}" for i in range(100)]

    async def burst() -> tuple[list[int], list[int]]:
        limits = httpx.Limits(max_connections=16)
        # httpx's pool slows down with many waiters: at most 16 requests in flight.
        gate = asyncio.Semaphore(16)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as c:
            async def one(i: int) -> int:
                node = nodes[i % 100]
                async with gate:
                        r = await c.post("/v1/heartbeat", headers=auth(node), json=heartbeat(
                        node, [job(f"{node}-j{k}", "PC") for k in range(3)], seq=i))
                return r.status_code

            async def extender() -> int:
                r = await c.post("/filter", json={"Pod": {"metadata": {"name": "p"}},
                                                  "NodeNames": nodes})
                return r.status_code

            hb = asyncio.gather(*(one(i) for i in range(1000)))
            ext = asyncio.gather(*(extender() for _ in range(20)))
            a, b = await asyncio.gather(hb, ext)
            return list(a), list(b)

    codes, ext_codes = asyncio.run(burst())
    assert codes == [200] * 1000
    assert ext_codes == [200] * 20
    state: ClusterState = app.state.cluster
    assert len(state.fresh_nodes()) == 100
    # The newest heartbeat of each node is the one kept (seq 900..999).
    assert all(state.heartbeat(n).seq >= 900 for n in nodes)  # type: ignore[union-attr]
    metrics = httpx.get(f"{url}/metrics").text
    assert 'specon_manager_heartbeats_total{result="accepted"} 1000.0' in metrics


def test_metrics_health_and_openapi(manager: Any) -> None:
    url, _ = manager
    httpx.post(f"{url}/v1/heartbeat", headers=auth("node-1"),
               json=heartbeat("node-1", [job("a", "WC")]))
    httpx.post(f"{url}/v1/heartbeat", json=heartbeat("node-1"))
    text = httpx.get(f"{url}/metrics").text
    assert 'specon_manager_heartbeats_total{result="unauthenticated"} 1.0' in text
    assert 'specon_manager_nodes{state="fresh"} 1.0' in text
    assert 'specon_manager_jobs{category="WC"} 1.0' in text
    assert httpx.get(f"{url}/healthz").text == "ok"
    assert httpx.get(f"{url}/readyz").status_code == 200
    # The API description is off unless asked for (expose_docs).
    assert httpx.get(f"{url}/openapi.json").status_code == 404
    assert httpx.get(f"{url}/docs").status_code == 404
    with serve(create_app(ManagerSettings(kubernetes=False, expose_docs=True))) as docs_url:
        spec = httpx.get(f"{docs_url}/openapi.json").json()
        assert httpx.get(f"{docs_url}/docs").status_code == 200
    assert {"/filter", "/prioritize", "/v1/heartbeat", "/v1/reallocate"} <= set(spec["paths"])


def test_tokens_file(tmp_path: Any) -> None:
    f = tmp_path / "tokens"
    f.write_text("# agents\nabcdefghijklmnop0001 node-a\n\nabcdefghijklmnop0002 node-b # b\n")
    t = NodeTokens.from_file(f)
    assert t.node_for("abcdefghijklmnop0002") == "node-b"
    assert t.node_for("abcdefghijklmnop0003") is None
    f.write_text("short node-a\n")
    with pytest.raises(TokenError, match="tokens:1: a token must be at least 16"):
        NodeTokens.from_file(f)
    f.write_text("abcdefghijklmnop0001\n")
    with pytest.raises(TokenError, match="expected 'TOKEN NODE'"):
        NodeTokens.from_file(f)


@pytest.mark.parametrize(("env", "says"), [
    ({}, "agent_service_accounts"),  # in a cluster, agents are reviewed: whose tokens?
    ({"SPECON_MANAGER_AGENT_SERVICE_ACCOUNTS": '["no-colon"]'}, "not namespace:name"),
    ({"SPECON_MANAGER_KUBERNETES": "false", "SPECON_MANAGER_TLS_CERT_FILE": "/x.crt"},
     "tls_cert_file and tls_key_file go together"),
    ({"SPECON_MANAGER_KUBERNETES": "false", "SPECON_MANAGER_EXTENDER_CLIENT_CA_FILE": "/ca"},
     "extender_client_ca_file needs"),
])
def test_bad_identity_or_tls_settings_exit_2_with_one_clear_line(
        env: dict[str, str], says: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPECON_MANAGER_")}
    res = subprocess.run([sys.executable, "-m", "specon_manager"], env={**clean, **env},
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert says in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_a_standby_refuses_heartbeats_and_extender_calls_and_closes_the_connection() -> None:
    """Issue 15's fault campaign: after an API-server outage moved the Lease, the agents'
    kept-alive connections still reached the replica that had lost it, which accepted their
    heartbeats; the new leader saw their nodes stale. A standby now answers 503 and closes the
    connection, so the next request opens a new one (which the Service sends to the leader);
    the caller is authenticated first, so the answer tells a stranger nothing."""
    settings = ManagerSettings(kubernetes=False, heartbeat_interval_s=10)
    controller = Standby()
    app = create_app(settings, tokens=NodeTokens(TOKENS), controller=controller)
    with serve(app) as url, httpx.Client(base_url=url) as c:
        r = c.post("/v1/heartbeat", headers=auth("node-1"), json=heartbeat("node-1"))
        assert r.status_code == 503 and "standby" in r.json()["detail"]
        assert r.headers["connection"] == "close"
        assert c.post("/v1/heartbeat", json=heartbeat("node-1")).status_code == 401
        args = {"Pod": {"metadata": {"name": "p", "namespace": "n"}}, "NodeNames": ["node-1"]}
        for verb in ("filter", "prioritize"):
            r = c.post(f"/{verb}", json=args)
            assert r.status_code == 503 and r.headers["connection"] == "close"
        metrics = c.get("/metrics").text
        assert 'specon_manager_heartbeats_total{result="standby"} 1.0' in metrics
        assert ('specon_manager_extender_requests_total{result="standby",verb="filter"} 1.0'
                in metrics)
        # once it leads, the same connection-less calls are served
        controller.leader = True
        r = c.post("/v1/heartbeat", headers=auth("node-1"), json=heartbeat("node-1"))
        assert r.status_code == 200 and r.json()["accepted"] is True
        assert c.post("/prioritize", json=args).status_code == 200
