"""The heartbeat stream (``POST /v1/heartbeats``, one agent's heartbeats on one long-lived
request) under a real uvicorn: each heartbeat authenticated and validated as a single one is,
answered in order, the refusals each one line; the agent's link uses it, and falls back to
one request per heartbeat with a manager that does not offer it."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from managerlib import TOKENS, Clock, Standby, auth, heartbeat, job, serve, token

from specon.wire import Heartbeat, HeartbeatReply
from specon_agent.link import HeartbeatStream, ManagerLink
from specon_manager.app import create_app
from specon_manager.auth import NodeTokens
from specon_manager.identity import Refusal
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState


class Revocable:
    """Static tokens that a test can revoke (the agent-auth interface of the manager)."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self.tokens = dict(tokens)

    def cached(self, tok: str) -> str | Refusal:
        node = self.tokens.get(tok)
        return node if node is not None else Refusal("unknown_token", "unknown token")

    def authenticate(self, tok: str) -> str | Refusal:
        return self.cached(tok)


@pytest.fixture
def manager() -> Iterator[tuple[str, ClusterState, Revocable, Any]]:
    settings = ManagerSettings(kubernetes=False, max_agent_body_bytes=16 * 1024)
    state = ClusterState(stale_after_s=90)
    tokens = Revocable(TOKENS)
    app = create_app(settings, state=state, auth=tokens)  # type: ignore[arg-type]
    with serve(app) as url:
        yield url, state, tokens, app


def line(node: str, seq: int, jobs: list[dict[str, Any]] | None = None) -> bytes:
    return json.dumps(heartbeat(node, jobs, seq=seq)).encode()


def test_heartbeats_on_one_stream_are_each_recorded_and_answered_in_order(manager: Any) -> None:
    url, state, _, app = manager
    s = HeartbeatStream(url, token("node-1"), None, 10)
    try:
        assert s.refused is None
        assert app.state.metrics.heartbeat_streams._value.get() == 1
        for seq in range(1, 6):
            status, body = s.send(line("node-1", seq, [job(f"p{seq}", "PC")]))
            assert status == 200
            assert HeartbeatReply.model_validate_json(body).accepted
            hb = state.heartbeat("node-1")
            assert hb.seq == seq and [j.pod for j in hb.jobs] == [f"p{seq}"]
        # a token speaks for its node only: refused (403), and the stream goes on
        status, body = s.send(line("node-2", 1))
        assert status == 403 and "node-1" in json.loads(body)["detail"]
        assert state.heartbeat("node-2") is None
        # invalid heartbeats: 422 each, the stream goes on
        for bad in (b"{not json", b'{"node": "node-1"}', json.dumps(
                {**heartbeat("node-1", seq=9), "time": 1.0}).encode()):
            status, body = s.send(bad)
            assert status == 422, body
        # an older one, reordered, is answered accepted=false
        older = {**heartbeat("node-1", seq=2), "time": state.heartbeat("node-1").time - 1}
        status, body = s.send(json.dumps(older).encode())
        assert status == 200 and not HeartbeatReply.model_validate_json(body).accepted
        assert state.heartbeat("node-1").seq == 5
    finally:
        s.close()
    deadline = time.monotonic() + 5
    while app.state.metrics.heartbeat_streams._value.get() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert app.state.metrics.heartbeat_streams._value.get() == 0
    metrics = httpx.get(f"{url}/metrics").text
    assert 'specon_manager_heartbeats_total{result="accepted"} 6.0' in metrics
    assert 'specon_manager_heartbeats_total{result="forbidden"} 1.0' in metrics
    assert 'specon_manager_heartbeats_total{result="invalid"} 2.0' in metrics


def test_a_refused_token_gets_no_stream_and_a_revoked_one_ends_it(manager: Any) -> None:
    url, state, tokens, _ = manager
    s = HeartbeatStream(url, "not-a-token-of-this-manager", None, 10)
    assert s.refused is not None and s.refused[0] == 401
    s.close()
    s = HeartbeatStream(url, token("node-3"), None, 10)
    try:
        assert s.send(line("node-3", 1))[0] == 200
        del tokens.tokens[token("node-3")]
        status, _ = s.send(line("node-3", 2))
        assert status == 401
        assert state.heartbeat("node-3").seq == 1
        with pytest.raises((ConnectionError, OSError)):
            s.send(line("node-3", 3))
    finally:
        s.close()


def raw_stream(url: str, node: str, chunks: list[bytes]) -> list[dict[str, Any]]:
    """The answer lines to a stream whose body is sent in exactly these chunks."""
    u = urlsplit(url)
    with socket.create_connection((u.hostname, u.port), timeout=10) as sock:
        sock.sendall(f"POST /v1/heartbeats HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n"
                     f"authorization: Bearer {token(node)}\r\n\r\n".encode())
        for c in chunks:
            sock.sendall(b"%x\r\n%s\r\n" % (len(c), c))
        sock.sendall(b"0\r\n\r\n")
        out = b""
        while not out.endswith(b"0\r\n\r\n"):
            got = sock.recv(65536)
            if not got:
                break
            out += got
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    data = b""
    while body:  # de-chunk
        size, _, rest = body.partition(b"\r\n")
        n = int(size, 16)
        data, body = data + rest[:n], rest[n + 2:]
    return [json.loads(x) for x in data.splitlines()]


def test_lines_split_across_chunks_or_many_in_one_are_framed_by_newlines(manager: Any) -> None:
    url, state, _, _ = manager
    lines = [line("node-4", seq) for seq in range(1, 7)]
    joined = b"\n".join(lines) + b"\n"
    cut = [joined[:17], joined[17:400], joined[400:]]
    got = raw_stream(url, "node-4", cut)
    assert [g["status"] for g in got] == [200] * 6
    assert state.heartbeat("node-4").seq == 6
    # the last heartbeat needs no newline; blank lines are skipped
    got = raw_stream(url, "node-4", [b"\n\n" + line("node-4", 7)])
    assert [g["status"] for g in got] == [200] and state.heartbeat("node-4").seq == 7


def test_a_heartbeat_over_the_limit_ends_the_stream_with_413(manager: Any) -> None:
    url, state, _, _ = manager
    big = line("node-5", 2, [job(f"pod-{k}", "PC") for k in range(400)])
    assert len(big) > 16 * 1024
    got = raw_stream(url, "node-5", [line("node-5", 1) + b"\n", big[:9000], big[9000:]])
    assert [g["status"] for g in got] == [200, 413]
    assert state.heartbeat("node-5").seq == 1


def test_scores_and_attribution_stay_right_with_streams_per_request_agents_and_the_scheduler(
        manager: Any) -> None:
    import threading

    url, state, _, _ = manager
    names = [f"node-{i}" for i in range(30)]
    errors: list[str] = []
    cats = ("PC", "WC", "CC")

    def jobs(i: int, seq: int) -> list[dict[str, Any]]:
        return [job(f"{names[i]}-{seq}-{k}", cats[(i + k + seq) % 3]) for k in range(i % 5)]

    def streamer(i: int) -> None:
        s = HeartbeatStream(url, token(names[i]), None, 30)
        try:
            for seq in range(1, 41):
                status, body = s.send(line(names[i], seq, jobs(i, seq)))
                if status != 200 or not HeartbeatReply.model_validate_json(body).accepted:
                    errors.append(f"{names[i]} {seq}: {status} {body[:100]!r}")
        finally:
            s.close()

    def requester(i: int) -> None:
        with httpx.Client(base_url=url) as c:
            for seq in range(1, 41):
                r = c.post("/v1/heartbeat", headers=auth(names[i]),
                           json=heartbeat(names[i], jobs(i, seq), seq=seq))
                if r.status_code != 200 or not r.json()["accepted"]:
                    errors.append(r.text)

    def scheduler() -> None:
        with httpx.Client(base_url=url) as c:
            for _ in range(30):
                r = c.post("/prioritize", json={"Pod": {"metadata": {"labels": {
                    "specon.io/training": "true"}}}, "NodeNames": names})
                got = r.json()
                if [h["Host"] for h in got] != names or not all(
                        0 <= h["Score"] <= 10 for h in got):
                    errors.append(r.text[:200])

    threads = [threading.Thread(target=streamer if i % 2 else requester, args=(i,))
               for i in range(len(names))] + [threading.Thread(target=scheduler)
                                               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i, n in enumerate(names):  # each node holds its own last heartbeat, nobody else's
        hb = state.heartbeat(n)
        assert hb is not None and hb.node == n and hb.seq == 40
        assert [j.pod for j in hb.jobs] == [j["pod"] for j in jobs(i, 40)]
        for j in hb.jobs:
            assert state.find_job("default", j.pod) == (n, j)
    from specon.core.categorize import Category
    from specon.core.scoring import WorkerView, placement_scores

    views = []
    for i, n in enumerate(names):
        c = [Category(j["category"]) for j in jobs(i, 40)]
        views.append(WorkerView(n, c.count(Category.PROGRESSING), c.count(Category.WATCHING),
                                c.count(Category.CONVERGED), 0.0))
    r = httpx.post(f"{url}/prioritize", json={"Pod": {"metadata": {"labels": {
        "specon.io/training": "true"}}}, "NodeNames": names})
    assert {h["Host"]: h["Score"] for h in r.json()} == dict(placement_scores(views))


def hb(seq: int) -> Heartbeat:
    return Heartbeat(node="node-7", time=time.time(), seq=seq, capacity_cpus=2, load_cores=0.5)


def wait(check: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_the_agents_link_streams_and_falls_back_without_the_stream(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(token("node-7"))
    for hot in (True, False):  # hot_routes=False: a manager that reads the whole body first
        settings = ManagerSettings(kubernetes=False, migration=False)
        app = create_app(settings, tokens=NodeTokens(TOKENS), hot_routes=hot)
        replies: list[HeartbeatReply] = []
        with serve(app) as url:
            link = ManagerLink(url, token_file, interval_s=0.05, timeout_s=1.0,
                               on_reply=replies.append)
            link.start()
            try:
                for seq in range(1, 4):
                    link.offer_heartbeat(hb(seq))
                    wait(lambda seq=seq, app=app: (
                        app.state.cluster.heartbeat("node-7") or hb(0)).seq == seq)
                streams = app.state.metrics.heartbeat_streams._value.get()
                assert streams == (1 if hot else 0)
            finally:
                link.stop()
        assert replies and all(r.accepted for r in replies)


def test_a_silent_stream_is_ended_once_its_node_would_be_stale() -> None:
    settings = ManagerSettings(kubernetes=False, heartbeat_interval_s=0.2,
                               stale_after_intervals=2)
    with serve(create_app(settings, tokens=NodeTokens(TOKENS))) as url:
        s = HeartbeatStream(url, token("node-8"), None, 10)
        try:
            assert s.send(line("node-8", 1))[0] == 200
            time.sleep(0.8)
            got = s.response.readline()
            assert json.loads(got)["status"] == 408
        finally:
            s.close()


def test_the_stream_needs_clock_bounds_too() -> None:
    """A heartbeat on the stream is the same heartbeat: a time far from the manager's clock is
    refused there as on /v1/heartbeat (injected clock)."""
    clock = Clock()
    settings = ManagerSettings(kubernetes=False)
    state = ClusterState(stale_after_s=90, clock=clock)
    with serve(create_app(settings, state=state, tokens=NodeTokens(TOKENS))) as url:
        s = HeartbeatStream(url, token("node-9"), None, 10)
        try:
            status, body = s.send(json.dumps({**heartbeat("node-9"), "time": 10.0}).encode())
            assert status == 422 and "manager's clock" in body.decode()
        finally:
            s.close()


def test_the_link_reopens_a_stream_the_manager_ended_while_it_was_idle(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(token("node-6"))
    # the manager ends a stream silent for 0.4 s; the agent reports every 0.7 s
    settings = ManagerSettings(kubernetes=False, migration=False, heartbeat_interval_s=0.2,
                               stale_after_intervals=2)
    app = create_app(settings, tokens=NodeTokens(TOKENS))
    outcomes: list[str] = []
    with serve(app) as url:
        link = ManagerLink(url, token_file, interval_s=0.7, timeout_s=2.0,
                           on_outcome=lambda _k, o: outcomes.append(o))
        link.start()
        try:
            for seq in range(1, 4):
                link.offer_heartbeat(Heartbeat(node="node-6", time=time.time(), seq=seq,
                                               capacity_cpus=2, load_cores=0.5))
                wait(lambda seq=seq: (app.state.cluster.heartbeat("node-6") or hb(0)).seq
                     == seq)
        finally:
            link.stop()
    assert outcomes and set(outcomes) == {"ok"}, outcomes


@pytest.mark.parametrize(("path", "port", "status"), [
    ("/filter", 9443, 200), ("/prioritize", 9443, 200), ("/v1/heartbeat", 9443, 404),
    ("/v1/heartbeats", 9443, 404), ("/filter", 8080, 404), ("/prioritize", 8080, 404),
    ("/v1/heartbeat", 8080, 401), ("/v1/heartbeats", 8080, 401)])
def test_with_an_extender_port_each_hot_call_is_served_on_its_own_listener_only(
        path: str, port: int, status: int) -> None:
    import asyncio

    app = create_app(ManagerSettings(kubernetes=False, port=8080, extender_port=9443),
                     tokens=NodeTokens(TOKENS))
    body = b'{"Pod": {}, "NodeNames": ["node-1"]}'
    sent: list[dict[str, Any]] = []
    msgs: list[dict[str, Any]] = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return msgs.pop() if msgs else {"type": "http.disconnect"}

    async def send(msg: dict[str, Any]) -> None:
        sent.append(msg)

    scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(),
             "root_path": "", "scheme": "http", "query_string": b"", "http_version": "1.1",
             "server": ("127.0.0.1", port), "client": ("127.0.0.1", 1),
             "headers": [(b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())]}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == status


def test_a_replica_that_loses_the_lease_ends_its_streams_and_opens_none() -> None:
    """The standby rule (issue 15) on the stream: a replica that loses the Lease answers the
    next streamed heartbeat 503 and ends the stream, and refuses a new one with 503 and the
    connection closed, so the agent's next stream reaches the leader through the Service."""
    controller = Standby()
    controller.leader = True
    app = create_app(ManagerSettings(kubernetes=False), tokens=NodeTokens(TOKENS),
                     controller=controller)  # type: ignore[arg-type]
    with serve(app) as url:
        s = HeartbeatStream(url, token("node-1"), None, 10)
        try:
            assert s.send(line("node-1", 1))[0] == 200
            controller.leader = False
            status, body = s.send(line("node-1", 2))
            assert status == 503 and b"standby" in body
            with pytest.raises((ConnectionError, OSError, ValueError)):
                s.send(line("node-1", 3))
        finally:
            s.close()
        assert app.state.cluster.heartbeat("node-1").seq == 1
        s = HeartbeatStream(url, token("node-1"), None, 10)
        try:
            assert s.refused is not None and s.refused[0] == 503
            assert s.response.getheader("connection") == "close"
        finally:
            s.close()
        controller.leader = True
        s = HeartbeatStream(url, token("node-1"), None, 10)
        try:
            assert s.refused is None and s.send(line("node-1", 4))[0] == 200
        finally:
            s.close()
        metrics = httpx.get(url + "/metrics").text
        assert 'specon_manager_heartbeats_total{result="standby"} 2.0' in metrics
