"""Helpers for the manager's plane tests: the real ``specon-manager`` process, a stand-in for
the node agent's heartbeat and checkpoint duties, and a stand-in for a training job's loop
that checkpoints with the real SDK.

The two stand-ins exist because KWOK nodes run no containers: ``AgentStandIn`` does what an
agent does over the real HTTP API (heartbeats, writing the request file, reporting
``saved.json``) and ``JobStandIn`` is the job's step loop with the real
:class:`specon.sdk.Checkpointer` on a real directory. Neither fakes the manager or the API."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from planelib import Plane, free_port

from specon.sdk import REQUEST_FILE, SAVED_FILE, Checkpointer, Reporter

REPO = Path(__file__).resolve().parents[2]


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 60, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


class ManagerProcess:
    """``python -m specon_manager`` against the plane, on a fixed loopback port."""

    def __init__(self, plane: Plane, workdir: Path, tokens: dict[str, str],
                 **settings: Any) -> None:
        self.plane = plane
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tokens_file = workdir / "tokens"
        self.tokens_file.write_text("".join(f"{t} {n}\n" for t, n in tokens.items()))
        self.settings = {"host": "127.0.0.1", "port": self.port, "kubeconfig": plane.kubeconfig,
                         "tokens_file": self.tokens_file, "reconcile_period_s": 0.3,
                         "heartbeat_interval_s": 60, "rebalance": False,
                         "checkpoint_timeout_s": 20, **settings}
        self.log = workdir / "manager.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, **override: Any) -> None:
        env = {**os.environ}
        for k, v in {**self.settings, **override}.items():
            env[f"SPECON_MANAGER_{k.upper()}"] = str(v).lower() if isinstance(v, bool) else str(v)
        self.starts += 1
        with self.log.open("ab") as out:
            out.write(f"\n=== start {self.starts} {override}\n".encode())
            self.proc = subprocess.Popen([sys.executable, "-m", "specon_manager"], env=env,
                                         stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                         start_new_session=True)

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"manager exited {self.proc.returncode}:\n{self.tail()}")
            try:
                return httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("the manager ready", ready, timeout=60)

    def wait_exit(self, timeout: float = 60) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


class JobStandIn:
    """A training job's step loop on a real checkpoint directory (real SDK)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.step = 0
        self.state: dict[str, Any] = {"weights": [0.0, 0.0], "step": 0}
        self.log = io.StringIO()
        self.ckpt = Checkpointer(directory, handle_sigterm=False,
                                 reporter=Reporter(directory / "progress.jsonl", self.log))

    def run_steps(self, n: int) -> None:
        for _ in range(n):
            self.step += 1
            self.state = {"weights": [w + 0.5 for w in self.state["weights"]], "step": self.step}
            self.ckpt.step_end(self.step, self.state)

    def saved(self) -> dict[str, Any] | None:
        try:
            out: dict[str, Any] = json.loads((self.directory / SAVED_FILE).read_text())
            return out
        except (OSError, ValueError):
            return None


class AgentStandIn:
    """What a node agent sends and does for the manager, over the manager's real HTTP API."""

    def __init__(self, url: str, node: str, token: str) -> None:
        self.url = url
        self.node = node
        self.headers = {"Authorization": f"Bearer {token}"}
        self.seq = 0
        self.jobs: dict[str, dict[str, Any]] = {}  # pod -> JobReport fields
        self.checkpoint_dirs: dict[str, JobStandIn] = {}

    def set_jobs(self, jobs: dict[str, str], namespace: str) -> None:
        self.jobs = {pod: {"namespace": namespace, "pod": pod, "category": cat}
                     for pod, cat in jobs.items()}

    def beat(self) -> dict[str, Any] | None:
        """One heartbeat; writes the request file for every checkpoint request (as an agent
        does). Returns the reply, or None while the manager is away."""
        self.seq += 1
        jobs = []
        for pod, rep in self.jobs.items():
            rep = dict(rep)
            job = self.checkpoint_dirs.get(pod)
            saved = job.saved() if job else None
            if saved is not None:
                rep["checkpoint"] = {"request": saved.get("request"), "name": saved["checkpoint"],
                                     "step": saved["step"], "sha256": saved["sha256"],
                                     "time": saved["time"]}
            jobs.append(rep)
        body = {"node": self.node, "time": time.time(), "seq": self.seq, "capacity_cpus": 4,
                "load_cores": 0.5 * len(jobs), "jobs": jobs}
        try:
            r = httpx.post(f"{self.url}/v1/heartbeat", json=body, headers=self.headers,
                           timeout=5)
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            raise AssertionError(f"heartbeat refused: {r.status_code} {r.text}")
        reply: dict[str, Any] = r.json()
        for req in reply["checkpoint_requests"]:
            job = self.checkpoint_dirs.get(req["pod"])
            if job is not None:
                tmp = job.directory / ".tmp-request"
                tmp.write_text(json.dumps({"id": req["id"], "exit": req["exit"]}))
                tmp.rename(job.directory / REQUEST_FILE)
        return reply

    def reallocate(self, namespace: str, pod: str) -> dict[str, Any]:
        r = httpx.post(f"{self.url}/v1/reallocate", headers=self.headers, timeout=10, json={
            "node": self.node, "namespace": namespace, "pod": pod, "time": time.time()})
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out
