"""Issue 29 (second round), item 2: a watchdog for the agent's control loop. The real loop
(:meth:`Agent.run` in a thread) reports to the real manager app under uvicorn through the real
link, and serves ``/metrics`` and ``/healthz`` as ``specon-agent`` does. A step of the loop is
then blocked by a **fault-injection** progress source whose poll never returns until released:
``/healthz`` answers 503 with the reason within the bound, no heartbeat leaves any more and the
manager sees the node stale. Before, the link sent the stalled loop's last heartbeat again
every interval, so the node stayed fresh, and the livenessProbe asked ``/metrics``, which a
stalled loop still serves. Released, the loop is healthy again and reports."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from servelib import serve

from specon_agent.actuators.cgroup import CgroupActuator
from specon_agent.agent import Agent
from specon_agent.cpu import CpuMeter
from specon_agent.discovery import Target
from specon_agent.followed import FollowedJob
from specon_agent.health import serve as serve_health
from specon_agent.link import ManagerLink
from specon_agent.loop_config import LoopConfig
from specon_agent.progress import Reading
from specon_agent.tail import TailStats
from specon_manager.app import create_app
from specon_manager.auth import NodeTokens
from specon_manager.settings import ManagerSettings

TOKEN = "agent-test-token-0123456789"
CID = "w" * 64
STALL_S = 1.0  # the watchdog's bound (the default is 3 poll intervals, at least 30 s)


class Actuator(CgroupActuator):
    """Writes nothing (no cgroups here)."""

    def apply_many(self, fractions, floor=0.0):  # type: ignore[no-untyped-def]
        return [], {}


class FaultInjectionStallingSource:
    """Fault injection: a job's progress source whose poll blocks while ``stalled`` is set,
    until ``release`` is; it stands for any step of the loop that does not return."""

    def __init__(self) -> None:
        self.path = Path("/fault-injection/stalling-source")
        self.stats = TailStats()
        self.strikes = 0
        self.stalled = threading.Event()
        self.release = threading.Event()
        self.blocked = threading.Event()

    def poll(self) -> Reading:
        if self.stalled.is_set():
            self.blocked.set()
            self.release.wait(60)
        return Reading([], 0)

    def close(self) -> None:
        self.release.set()


def healthz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait(what: str, check: Callable[[], object], timeout: float = 20.0) -> float:
    """Seconds until ``check()`` holds."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(120)
def test_a_stalled_loop_fails_healthz_and_sends_no_fresh_heartbeat(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    app = create_app(ManagerSettings(kubernetes=False, migration=False,  # type: ignore[call-arg]
                                     heartbeat_interval_s=0.2, stale_after_intervals=3.0),
                     tokens=NodeTokens({TOKEN: "node-a"}))
    state = app.state.cluster
    with serve(app) as url:
        link = ManagerLink(url, token_file, interval_s=0.2, timeout_s=2.0, backoff_max_s=0.4)
        agent = Agent(LoopConfig(node="node-a", poll_s=0.1, stall_s=STALL_S), Actuator(node_cpus=2),
                      CpuMeter(), link=link)
        source = FaultInjectionStallingSource()
        agent.jobs[CID] = FollowedJob(Target(cid=CID, namespace="ns", pod="train-a"),
                                      source)  # type: ignore[arg-type]
        agent.control.arrive(CID, time.time(), None)
        health = serve_health(agent.metrics.registry, agent.watchdog, 0, "127.0.0.1")
        port = health.server_port
        stop = threading.Event()
        loop = threading.Thread(target=agent.run, args=(stop,), daemon=True)
        loop.start()
        link.start()

        def delivered() -> float:
            return float(agent.metrics.manager_calls.labels("heartbeat", "ok")._value.get())

        def last_pass_time() -> float:
            value = agent.metrics.registry.get_sample_value(
                "specon_agent_loop_last_pass_timestamp_seconds")
            assert value is not None
            return value

        try:
            wait("heartbeats", lambda: delivered() >= 3 and state.is_fresh("node-a"))
            assert healthz(port) == (200, "ok\n")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                assert b"specon_agent_node_cpus" in r.read()

            source.stalled.set()  # the next poll blocks the loop
            wait("the loop to block", source.blocked.is_set, timeout=5)
            took = wait("/healthz to fail", lambda: healthz(port)[0] == 503)
            assert took < STALL_S + 1.0, f"/healthz failed {took:.1f} s after the stall"
            status, reason = healthz(port)
            assert status == 503 and "control loop stalled" in reason and "bound 1 s" in reason
            # What the livenessProbe asked before: a stalled loop still serves it.
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                assert r.status == 200
            # No fresh heartbeat leaves (the last one made before the stall has gone by now),
            # and the manager sees the node stale (3 intervals of 0.2 s).
            sent, last_pass = delivered(), last_pass_time()
            time.sleep(2.0)  # 10 of the link's intervals
            assert delivered() == sent, "heartbeats left while the loop was stalled"
            assert not state.is_fresh("node-a")
            # What SpeconAgentLoopStalled reads: the time of the last pass stands still.
            assert last_pass_time() == last_pass < time.time() - 2.0

            source.stalled.clear()
            source.release.set()
            wait("/healthz to recover", lambda: healthz(port) == (200, "ok\n"), timeout=5)
            wait("heartbeats again", lambda: delivered() > sent and state.is_fresh("node-a"),
                 timeout=10)
            assert last_pass_time() > last_pass
        finally:
            source.release.set()
            stop.set()
            loop.join(10)
            link.stop()
            health.shutdown()
            health.server_close()
