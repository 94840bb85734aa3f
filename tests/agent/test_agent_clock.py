"""The agent when its node's clock steps (issue 32): its loop runs on the monotonic clock, its
heartbeats are stamped when sent and a heartbeat the manager took is never sent again, so a
wall-clock step forward and back neither stalls the loop nor freezes the node's report at the
manager; a restarted agent is heard at once. The real agent loop and link against the real
manager app under uvicorn; the wall clock is a fake that injects clock steps."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from servelib import serve

from specon.wire import Heartbeat
from specon_agent.actuators.cgroup import CgroupActuator
from specon_agent.agent import Agent
from specon_agent.link import ManagerLink
from specon_agent.loop_config import LoopConfig
from specon_manager.app import create_app
from specon_manager.auth import NodeTokens
from specon_manager.settings import ManagerSettings

TOKEN = "agent-clock-test-token-0123456789"
NODE = "node-a"


class SteppedClock:
    """Fault injection: the wall clock of the agent's node, stepped by the test (the real
    time plus an offset the test sets)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


class Actuator(CgroupActuator):
    """Writes nothing (no cgroups here; the node has no jobs)."""

    def apply_many(self, fractions, floor=0.0):  # type: ignore[no-untyped-def]
        return [], {}


class Meter:
    def usage_ns(self, cid: str) -> int | None:
        return None

    def wait_ns(self, cid: str) -> int | None:
        return None

    def forget(self, cid: str) -> None:
        pass


@contextmanager
def manager() -> Iterator[tuple[str, Any]]:
    app = create_app(ManagerSettings(kubernetes=False, migration=False),
                     tokens=NodeTokens({TOKEN: NODE}))
    with serve(app) as url:
        yield url, app


@contextmanager
def running_agent(url: str, token_file: Path, wall: SteppedClock) -> Iterator[Agent]:
    link = ManagerLink(url, token_file, interval_s=0.1, timeout_s=2.0, backoff_max_s=0.3)
    agent = Agent(LoopConfig(node=NODE, interval_s=0.5, poll_s=0.05), Actuator(node_cpus=2),
                  Meter(), link=link, clock=wall)  # type: ignore[arg-type]
    stop = threading.Event()
    loop = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    loop.start()
    link.start()
    try:
        yield agent
    finally:
        stop.set()
        loop.join(5)
        link.stop()


def last(app: Any) -> Heartbeat:
    hb = app.state.cluster.heartbeat(NODE)
    assert hb is not None
    return hb  # type: ignore[no-any-return]


def wait(check: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_clock_an_hour_ahead_and_back_is_heard_right_again_at_once(tmp_path: Path) -> None:
    """Before: the loop, scheduled on the wall clock, stalled for the hour and the link kept
    sending the heartbeat built in the future, refused all that time."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    wall = SteppedClock()
    with manager() as (url, app), running_agent(url, token_file, wall) as agent:
        wait(lambda: app.state.cluster.heartbeat(NODE) is not None, "a first heartbeat")
        # +3600 s: beyond the manager's tolerance, each heartbeat is refused
        wall.offset = 3600.0
        time.sleep(0.3)
        before = last(app).seq
        time.sleep(0.7)
        assert last(app).seq == before  # refused: the node's report is left alone
        assert agent.metrics.manager_calls.labels("heartbeat", "http_4xx")._value.get() > 0
        # and back: the next heartbeat is stamped right and taken at once
        wall.offset = 0.0
        wait(lambda: last(app).seq > before and abs(last(app).time - time.time()) < 5,
             "a heartbeat stamped right after the clock stepped back", timeout=5.0)


def test_a_clock_two_minutes_ahead_and_back_never_freezes_the_report(tmp_path: Path) -> None:
    """Before: the loop stalled for the two minutes while the link sent its last heartbeat
    again and again: the node looked fresh, its report frozen."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    wall = SteppedClock()
    with manager() as (url, app), running_agent(url, token_file, wall):
        # +120 s (inside the tolerance) and back: the report keeps moving
        wall.offset = 120.0
        wait(lambda: app.state.cluster.heartbeat(NODE) is not None
             and last(app).time > time.time() + 60, "a heartbeat stamped 120 s ahead")
        wall.offset = 0.0
        seq = last(app).seq
        time.sleep(1.0)
        assert last(app).seq >= seq + 3, "the node's report stopped moving"
        assert abs(last(app).time - time.time()) < 5


def test_a_heartbeat_the_manager_took_is_not_sent_again(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    with manager() as (url, app):
        link = ManagerLink(url, token_file, interval_s=0.1)
        link.offer_heartbeat(Heartbeat(node=NODE, time=time.time() - 200, seq=1,
                                       capacity_cpus=2, load_cores=0.0))
        link.start()
        try:
            wait(lambda: app.state.cluster.heartbeat(NODE) is not None, "the heartbeat")
            time.sleep(1.0)  # ten intervals
        finally:
            link.stop()
        assert app.state.metrics.heartbeats.labels("accepted")._value.get() == 1
        # stamped when sent, not when it was built
        assert abs(last(app).time - time.time()) < 5


def test_a_restarted_agent_is_heard_at_once_after_its_clock_ran_ahead(tmp_path: Path) -> None:
    """The node's clock ran 250 s ahead (inside the tolerance); it was corrected and the agent
    restarted: its new heartbeats (seq from 1, earlier times) are kept at once."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    ahead = SteppedClock()
    ahead.offset = 250.0
    with manager() as (url, app):
        with running_agent(url, token_file, ahead):
            wait(lambda: (app.state.cluster.heartbeat(NODE) or Heartbeat(
                node=NODE, time=0, seq=0, capacity_cpus=1, load_cores=0)).seq >= 20,
                "twenty heartbeats from the first agent")
        first = last(app)
        with running_agent(url, token_file, SteppedClock()) as second:
            wait(lambda: last(app).seq < first.seq, "the restarted agent's heartbeat kept")
            assert last(app).time < first.time and last(app).boot == second.boot
