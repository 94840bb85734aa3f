"""The agent's link to the manager: heartbeats accepted by the real manager app (under a real
uvicorn) with the bearer token from a file, its parameters applied; a manager that answers 500
or hangs is counted and backed off from, and the control loop never waits for it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from loopback import JsonHandler, serving
from planelib import free_port
from servelib import serve

from specon.core.categorize import Category
from specon.wire import Heartbeat, HeartbeatReply, ReallocationRequest
from specon_agent.agent import Agent
from specon_agent.link import ManagerLink
from specon_agent.loop_config import LoopConfig
from specon_agent.metrics import AgentMetrics
from specon_manager.app import create_app
from specon_manager.auth import NodeTokens
from specon_manager.settings import ManagerSettings

TOKEN = "agent-test-token-0123456789"


@contextmanager
def real_manager(port: int | None = None, **settings: object) -> Iterator[tuple[str, object]]:
    app = create_app(ManagerSettings(kubernetes=False, migration=False, **settings),  # type: ignore[arg-type]
                     tokens=NodeTokens({TOKEN: "node-a"}))
    with serve(app, port) as url:
        yield url, app


class _FaultyManager(JsonHandler):
    """Fault injection: a manager that answers 500, or that never answers (hangs)."""

    mode = "500"
    release = threading.Event()
    calls = 0

    def do_POST(self) -> None:
        type(self).calls += 1
        if self.mode == "hang":
            self.release.wait(30)
            return
        self.reply(500, b'{"detail": "injected failure"}')


@contextmanager
def faulty_manager(mode: str) -> Iterator[tuple[str, type[_FaultyManager]]]:
    handler = type("Faulty", (_FaultyManager,), {"mode": mode, "release": threading.Event(),
                                                 "calls": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    with serving(server) as url:
        try:
            yield url, handler
        finally:
            handler.release.set()  # before the server's shutdown waits for its threads


def heartbeat(seq: int = 1) -> Heartbeat:
    return Heartbeat(node="node-a", time=time.time(), seq=seq, capacity_cpus=2, load_cores=0.5)


def wait(check: object, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_heartbeat_reaches_the_real_manager_with_the_token_from_its_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    replies: list[HeartbeatReply] = []
    outcomes: list[tuple[str, str]] = []
    with real_manager(alpha=0.02, interval_s=40.0) as (url, app):
        link = ManagerLink(url, token_file, interval_s=0.2, on_reply=replies.append,
                           on_outcome=lambda k, o: outcomes.append((k, o)))
        link.offer_heartbeat(heartbeat())
        link.start()
        try:
            wait(lambda: replies)
        finally:
            link.stop()
        state = app.state.cluster  # type: ignore[attr-defined]
        assert state.heartbeat("node-a") is not None
    assert replies[0].accepted and replies[0].parameters.alpha == 0.02
    assert ("heartbeat", "ok") in outcomes


def test_a_wrong_token_is_counted_as_refused(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("not-the-right-token-at-all")
    outcomes: list[tuple[str, str]] = []
    with real_manager() as (url, _app):
        link = ManagerLink(url, token_file, interval_s=0.1,
                           on_outcome=lambda k, o: outcomes.append((k, o)))
        link.offer_heartbeat(heartbeat())
        link.start()
        try:
            wait(lambda: outcomes)
        finally:
            link.stop()
    assert outcomes[0] == ("heartbeat", "http_4xx")


@pytest.mark.parametrize("mode", ["500", "hang"])
def test_a_failing_or_hanging_manager_is_backed_off_and_never_blocks_the_loop(
    mode: str, tmp_path: Path
) -> None:
    from specon_agent.actuators.cgroup import CgroupActuator
    from specon_agent.cpu import CpuMeter

    metrics = AgentMetrics()
    with faulty_manager(mode) as (url, handler):
        link = ManagerLink(url, None, interval_s=0.1, timeout_s=0.5, backoff_max_s=0.8)
        agent = Agent(LoopConfig(node="node-a", interval_s=0.2, poll_s=0.05),
                      CgroupActuator(node_cpus=2), CpuMeter(), link=link, metrics=metrics)
        link.start()
        try:
            # The loop keeps its own pace while every call fails or hangs.
            t0 = time.monotonic()
            passes = 0
            while time.monotonic() - t0 < 3.0:
                agent.step()
                passes += 1
                time.sleep(0.01)
            link.request_reallocation(ReallocationRequest(
                node="node-a", namespace="docker", pod="p", time=time.time()))
            time.sleep(1.0)
        finally:
            link.stop()
    assert passes > 50
    outcome = "http_5xx" if mode == "500" else "timeout"
    failed = metrics.manager_calls.labels("heartbeat", outcome)._value.get()
    assert failed >= 2
    assert link.failures >= 2
    # Backed off: far fewer calls than one per 0.1 s interval over 4 s.
    assert handler.calls < 20
    assert agent.control.counts() == dict.fromkeys(Category, 0)


def test_reports_again_when_the_manager_returns(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    port = free_port()
    outcomes: list[tuple[str, str]] = []
    replies: list[HeartbeatReply] = []
    link = ManagerLink(f"http://127.0.0.1:{port}", token_file, interval_s=0.1, timeout_s=0.5,
                       backoff_max_s=0.5, on_reply=replies.append,
                       on_outcome=lambda k, o: outcomes.append((k, o)))
    link.offer_heartbeat(heartbeat(1))
    link.start()
    try:
        wait(lambda: link.failures >= 3)  # nobody listens yet
        assert {o for _, o in outcomes} == {"unreachable"}
        link.offer_heartbeat(heartbeat(2))
        with real_manager(port=port) as (_url, app):
            wait(lambda: link.last_success is not None)
            assert replies and replies[-1].accepted
            hb = app.state.cluster.heartbeat("node-a")  # type: ignore[attr-defined]
            assert hb is not None and hb.seq == 2  # the newest state, not the stale one
    finally:
        link.stop()
