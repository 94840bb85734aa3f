"""Helpers for the agent's tests on the real Docker Engine: training containers from the base
image, the `specon-agent` process, and reading its /metrics."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import docker
from docker.models.containers import Container
from dockerlib import LABEL, ROOT


def unique_label() -> str:
    """Each test's agent follows only the containers carrying its own label (others' tests may
    run training containers on the same engine at the same time)."""
    return f"specon.test/agent-{secrets.token_hex(4)}"


def training(
    engine: docker.DockerClient,
    image: str,
    label: str,
    model: str,
    iterations: int,
    *args: str,
    quota_us: int = 100_000,
    extra_labels: dict[str, str] | None = None,
    **options: Any,
) -> Container:
    """A real example training job (PyTorch, one thread), the repository mounted read-only."""
    return engine.containers.run(
        image,
        ["python3", "-m", "specon_examples", model, "--iterations", str(iterations),
         "--threads", "1", *args],
        detach=True, network_mode="none", working_dir="/src",
        volumes={str(ROOT): {"bind": "/src", "mode": "ro"}},
        environment={"PYTHONPATH": "/src", **options.pop("environment", {})},
        labels={**LABEL, label: "true", **(extra_labels or {})},
        cpu_period=100_000, cpu_quota=quota_us, **options,
    )


def quota(container: Container) -> int:
    container.reload()
    return int(container.attrs["HostConfig"]["CpuQuota"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AgentProcess:
    """`specon-agent` run as its console script would be, its log kept in a file."""

    def __init__(self, args: Sequence[str], log_path: Path, env: dict[str, str] | None = None):
        self.port = free_port()
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115
        if "--policy" not in args:
            # These tests check the research's rules (FlowCon's limits, Algorithm 3's
            # requests); the shipped policy's are test_agent_progress_policy.py's.
            args = [*args, "--policy", "paper"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specon_agent", "--metrics-port", str(self.port),
             "--metrics-address", "127.0.0.1", *args],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT,
            env={**os.environ, **(env or {})},
        )

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def sample(self, name: str, **labels: str) -> float | None:
        """One series' value from /metrics (None: absent or the agent not answering yet)."""
        try:
            text = self.metrics()
        except OSError:
            return None
        for line in text.splitlines():
            m = re.match(r"^([a-zA-Z_:]+)(\{.*\})? (\S+)$", line)
            if not m or m.group(1) != name:
                continue
            found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            if all(found.get(k) == v for k, v in labels.items()):
                return float(m.group(3))
        return None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return int(self.proc.returncode)


@contextlib.contextmanager
def agent_process(args: Sequence[str], log_path: Path,
                  env: dict[str, str] | None = None) -> Iterator[AgentProcess]:
    agent = AgentProcess(args, log_path, env)
    try:
        yield agent
    finally:
        agent.stop()


def wait_for(what: str, check: Callable[[], bool], timeout: float, log: Callable[[], str],
             every: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    tail = "\n".join(log().splitlines()[-40:])
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; agent log:\n{tail}")
