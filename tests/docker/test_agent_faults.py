"""Faults around the agent on the real engine: garbage in the logs, a container that dies in the
middle of a write, a cgroup that vanishes under the cgroup actuator, and an engine that goes
away and comes back. Each time the agent logs it, counts it, keeps the other jobs under control
and does not crash. (A manager answering 500 or hanging: tests/agent/test_manager_link.py.)"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from agentlib import AgentProcess, agent_process, quota, unique_label, wait_for
from docker.models.containers import Container
from dockerlib import LABEL

from specon_agent.actuators.cgroup import CgroupActuator
from specon_agent.agent import Agent
from specon_agent.cpu import CpuMeter
from specon_agent.discovery import Arrived, DockerDiscovery
from specon_agent.loop_config import LoopConfig

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]

# A light job: a falling loss, one line every 0.1 s (no torch needed).
STEADY = ("import math, time\n"
          "for i in range(10**6):\n"
          "    print(f'step {i} loss={math.exp(-i / 50) + 0.01:.6f}', flush=True)\n"
          "    time.sleep(0.1)\n")

# Garbage between loss lines: bytes that are not UTF-8, a torn SDK record, control characters,
# a line far longer than any parser limit, ANSI colours.
GARBAGE = ("import math, os, sys, time\n"
           "out = sys.stdout.buffer\n"
           "for i in range(10**6):\n"
           "    out.write(os.urandom(64) + b'\\n')\n"
           "    out.write(b'{\"specon\":1,\"event\":\"progress\",\"step\":' + str(i).encode()"
           " + b',\"loss\":\\n')\n"
           "    out.write(b'\\x00\\x07\\x1b[31mloss=\\x1b[0m nan-ish\\n')\n"
           "    if i % 20 == 0: out.write(b'x' * 300000 + b'\\n')\n"
           "    out.write(f'step {i} loss={math.exp(-i / 50) + 0.01:.6f}\\n'.encode())\n"
           "    out.flush(); time.sleep(0.1)\n")


def run_py(engine: docker.DockerClient, image: str, label: str, code: str,
           **options: object) -> Container:
    return engine.containers.run(
        image, ["python3", "-c", code], detach=True, network_mode="none",
        labels={**LABEL, label: "true"}, cpu_period=100_000, cpu_quota=50_000,
        **options)  # type: ignore[arg-type]


@contextlib.contextmanager
def containers(engine: docker.DockerClient) -> Iterator[list[Container]]:
    made: list[Container] = []
    try:
        yield made
    finally:
        for c in made:
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True)


def test_garbage_in_the_log_is_counted_and_the_loss_still_followed(
    engine: docker.DockerClient, base_image: str, tmp_path: Path
) -> None:
    label = unique_label()
    with containers(engine) as made, agent_process(
            ["--label", label, "--poll-s", "0.5", "--interval-s", "5"],
            tmp_path / "agent.log") as agent:
        made.append(run_py(engine, base_image, label, GARBAGE))
        made.append(run_py(engine, base_image, label, STEADY))
        jobs = [{"namespace": "docker", "pod": c.name, "container": "main"} for c in made]

        def errors() -> float:
            return agent.sample("specon_agent_parse_errors_total") or 0.0

        def losses() -> list[float | None]:
            return [agent.sample("specon_agent_job_loss", **j) for j in jobs]

        # The error counter moves as a log is read, the loss gauges when the pass publishes:
        # wait for both (one scrape could fall between the two).
        wait_for("parse errors counted and losses followed",
                 lambda: errors() >= 20 and None not in losses(), 60, agent.log)
        first = losses()
        assert all(v is not None and v < 1.5 for v in first), first
        # Still following: the losses keep falling, both jobs keep their limits.
        wait_for("new losses", lambda: all(
            (agent.sample("specon_agent_job_loss", **j) or 9) < v
            for j, v in zip(jobs, first, strict=True) if v is not None), 60, agent.log)
        assert all(agent.sample("specon_agent_job_cpu_limit_cores", **j) for j in jobs)
        assert agent.alive()
    assert "Traceback" not in agent.log()


def test_a_container_dying_mid_write_leaves_the_others_under_control(
    engine: docker.DockerClient, base_image: str, tmp_path: Path
) -> None:
    label = unique_label()
    progress = tmp_path / "progress"
    progress.mkdir(mode=0o777)
    # The SDK's progress file on a bind mount, cut in the middle of a record by SIGKILL.
    dying = ("import time\n"
             "f = open('/progress/p.jsonl', 'a')\n"
             "for i in range(1, 30):\n"
             "    f.write('{\"specon\":1,\"event\":\"progress\",\"step\":%d,\"loss\":%f,"
             "\"time\":1}\\n' % (i, 10.0 / i)); f.flush(); time.sleep(0.1)\n"
             "f.write('{\"specon\":1,\"event\":\"progress\",\"step\":30,\"lo'); f.flush()\n"
             "time.sleep(600)\n")
    with containers(engine) as made, agent_process(
            ["--label", label, "--poll-s", "0.5", "--interval-s", "5"],
            tmp_path / "agent.log") as agent:
        steady = run_py(engine, base_image, label, STEADY)
        made.append(steady)
        victim = run_py(engine, base_image, label, dying,
                        environment={"SPECON_PROGRESS_FILE": "/progress/p.jsonl"},
                        volumes={str(progress): {"bind": "/progress", "mode": "rw"}})
        made.append(victim)
        vjob = {"namespace": "docker", "pod": victim.name, "container": "main"}
        wait_for("the dying job's progress file followed", lambda: agent.sample(
            "specon_agent_job_loss", **vjob) is not None, 60, agent.log)
        assert "p.jsonl" in agent.log()  # followed from its progress file, not its log
        wait_for("the torn record written", lambda: (progress / "p.jsonl").read_bytes()
                 .endswith(b'"lo'), 60, agent.log)
        victim.kill()  # SIGKILL mid-record (a process cannot SIGKILL itself as PID 1)
        wait_for("the dying job gone", lambda: agent.sample(
            "specon_agent_job_cpu_limit_cores", **vjob) is None, 60, agent.log)
        victim.reload()
        assert victim.attrs["State"]["ExitCode"] == 137
        # The other job is still followed and its limit is the agent's: the whole node again.
        sjob = {"namespace": "docker", "pod": steady.name, "container": "main"}
        assert agent.sample("specon_agent_job_cpu_limit_cores", **sjob) == float(
            engine.info()["NCPU"])
        assert quota(steady) == round(float(engine.info()["NCPU"]) * 100_000)
        assert agent.alive()
    assert "Traceback" not in agent.log()


def test_a_vanished_cgroup_is_dropped_and_counted_while_the_others_stay_limited(
    engine: docker.DockerClient, base_image: str
) -> None:
    label = unique_label()
    actuator = CgroupActuator()
    discovery = DockerDiscovery(engine, label)
    agent = Agent(LoopConfig(node="faults", interval_s=5, poll_s=0.5), actuator, CpuMeter())
    with containers(engine) as made:
        for _ in range(3):
            made.append(run_py(engine, base_image, label, STEADY))
        targets = [discovery.target(engine.api.inspect_container(c.id)) for c in made]
        assert all(t is not None for t in targets)
        now = time.time()
        agent.handle(Arrived(targets[0]), now)  # type: ignore[arg-type]
        agent.handle(Arrived(targets[1]), now)  # type: ignore[arg-type]
        assert set(actuator.changed) == {made[0].id, made[1].id}
        # The container and its cgroup vanish without the agent hearing of it...
        made[1].remove(force=True)
        # ...and the next limit change (a third job arrives) finds it gone.
        agent.handle(Arrived(targets[2]), now + 1)  # type: ignore[arg-type]
        assert made[1].id not in agent.jobs
        assert set(agent.jobs) == {made[0].id, made[2].id}
        gone = agent.metrics.limit_failures.labels("gone")._value.get()
        assert gone == 1
        # The others are still under the agent's control: their quota is its decision.
        for c in (made[0], made[2]):
            assert actuator.read(c.id) == actuator.limit_for(agent.control.limits[c.id])
        agent.close()
        assert actuator.changed == frozenset()


class FaultyEngineSocket:
    """Fault injection: a Unix-socket relay to the real engine that can be cut and restored,
    which is what an agent sees when the engine restarts (without disturbing the engine that
    other tests share)."""

    def __init__(self, path: Path, target: str = "/var/run/docker.sock") -> None:
        self.path = path
        self.target = target
        self._server: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(self.path))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            try:
                upstream.connect(self.target)
            except OSError:
                client.close()
                upstream.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            self._server.close()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with self._lock:
            for s in self._conns:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._conns = []


def test_the_engine_going_away_and_back_is_survived_and_missed_changes_caught_up(
    engine: docker.DockerClient, base_image: str, tmp_path: Path
) -> None:
    label = unique_label()
    relay = FaultyEngineSocket(tmp_path / "engine.sock")
    relay.start()
    args = ["--label", label, "--poll-s", "0.5", "--interval-s", "5",
            "--docker-host", f"unix://{relay.path}"]
    try:
        with containers(engine) as made, agent_process(args, tmp_path / "agent.log") as agent:
            made.append(run_py(engine, base_image, label, STEADY))
            first = {"namespace": "docker", "pod": made[0].name, "container": "main"}
            wait_for("the first job followed", lambda: agent.sample(
                "specon_agent_job_cpu_limit_cores", **first) is not None, 60, agent.log)
            relay.cut()
            # While the engine is away: one job ends, another starts.
            made[0].remove(force=True)
            made.append(run_py(engine, base_image, label, STEADY))
            second = {"namespace": "docker", "pod": made[1].name, "container": "main"}
            time.sleep(3)
            assert agent.alive()
            relay.start()
            wait_for("the missed arrival caught up", lambda: agent.sample(
                "specon_agent_job_cpu_limit_cores", **second) is not None, 60, agent.log)
            wait_for("the missed departure caught up", lambda: agent.sample(
                "specon_agent_job_cpu_limit_cores", **first) is None, 30, agent.log)
            reconnects = sum(
                float(line.rsplit(" ", 1)[1]) for line in agent.metrics().splitlines()
                if line.startswith("specon_agent_discovery_reconnects_total{"))
            assert reconnects >= 1
            assert quota(made[1]) == round(float(engine.info()["NCPU"]) * 100_000)
            assert agent.alive()
        assert "Traceback" not in agent.log()
    finally:
        relay.cut()


def test_after_kill_9_the_next_agent_restores_the_owners_limits(
    engine: docker.DockerClient, base_image: str, tmp_path: Path
) -> None:
    """Issue 15's failure, on the real engine: the agent changes a container's limit, is killed
    with SIGKILL (nothing of it runs after), and a new agent starts. With the originals file it
    first puts back the owner's 0.5 core, and a clean stop leaves the owner's limit; before, the
    new agent took the first one's limit for the owner's and left it there."""
    label = unique_label()
    originals = tmp_path / "state" / "originals.json"
    args = ["--label", label, "--poll-s", "0.5", "--interval-s", "5",
            "--originals-file", str(originals)]
    owner = 50_000  # run_py's containers: 0.5 core, as their owner set it
    with containers(engine) as made:
        a = AgentProcess(args, tmp_path / "first.log")
        try:
            job = run_py(engine, base_image, label, STEADY)
            made.append(job)
            wait_for("the first agent to change the limit", lambda: quota(job) != owner, 60,
                     a.log)
            changed = quota(job)
            recorded = json.loads(originals.read_text())["originals"]
            assert {c[:12]: r["quota_us"] for c, r in recorded.items()} == {job.id[:12]: owner}
            a.proc.kill()  # SIGKILL: no restore, no clean-up
            a.proc.wait(30)
        finally:
            a.stop()  # (already dead: closes its log)
        assert quota(job) == changed  # the kernel still holds the killed agent's limit
        with agent_process(args, tmp_path / "second.log") as b:
            wait_for("the second agent to restore the recorded limit",
                     lambda: "limits an earlier run recorded" in b.log(), 60, b.log)
            assert "restored 1 of 1 limits" in b.log()
            # it then manages the job again from the owner's limit
            wait_for("the second agent to follow the job", lambda: b.sample(
                "specon_agent_job_cpu_limit_cores", namespace="docker", pod=job.name,
                container="main") is not None, 60, b.log)
        assert quota(job) == owner  # the clean stop left the owner's limit
        assert json.loads(originals.read_text())["originals"] == {}
