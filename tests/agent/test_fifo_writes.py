"""Issue 29, item 2, on real FIFOs: a pod cannot hang the agent by planting FIFOs where the
agent writes (the temporary name of ``request.json``'s atomic write) or reads (a progress file
named by a container label, without a confining root). Each call runs the real agent code in a
thread and must return within 2 s (the issue's bound on a stall); a hung thread is unblocked
afterwards by opening the FIFO's other end, so the test process itself never hangs."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

from specon.sdk import THREADS_FILE
from specon.wire import CheckpointRequest
from specon_agent.actuators.cgroup import CgroupActuator
from specon_agent.agent import Agent
from specon_agent.cpu import CpuMeter
from specon_agent.discovery import Target
from specon_agent.followed import FollowedJob
from specon_agent.loop_config import LoopConfig
from specon_agent.tail import FileTail

CID = "f" * 64
#: The issue's "done when": a pod's files never hold the loop longer than this.
MAX_STALL_S = 2.0


def returns_within(fn: Callable[[], object], seconds: float, fifos: list[Path],
                   flags: int) -> bool:
    """Run ``fn`` in a thread; whether it returned within ``seconds``. A call still blocked
    is then released by opening each FIFO with ``flags`` (the other end)."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(seconds)
    hung = t.is_alive()
    if hung:
        for f in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(f, flags | os.O_NONBLOCK))
        t.join(10)
    return not hung


def agent_following(root: Path, ckpt: Path) -> Agent:
    agent = Agent(LoopConfig(node="node-a"), CgroupActuator(node_cpus=4), CpuMeter())
    target = Target(cid=CID, namespace="ns", pod="train-a", uid="uid-a", checkpoint_dir=ckpt,
                    file_root=root, migratable=True)
    agent.jobs[CID] = FollowedJob(target, None)
    return agent


def test_fifos_at_the_request_temp_names_do_not_hang_the_agent(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    ckpt = root / "ns" / "job"
    ckpt.mkdir(parents=True)
    # The attacker's own checkpoint folder: FIFOs at every temporary name it can guess,
    # the agent's pid among them (here the agent runs in this process).
    fifos = [ckpt / f".request.json.tmp-{pid}" for pid in {1, 7, os.getpid()}]
    for f in fifos:
        os.mkfifo(f)
    agent = agent_following(root, ckpt)
    req = CheckpointRequest(namespace="ns", pod="train-a", id="mig-1")
    assert returns_within(lambda: agent._ask_checkpoint(req), MAX_STALL_S, fifos, os.O_RDONLY), (
        "the agent's request.json write blocked on a planted FIFO")
    assert json.loads((ckpt / "request.json").read_bytes()) == {"id": "mig-1", "exit": False}
    assert all(f.exists() for f in fifos)  # never opened, never replaced
    leftovers = {p.name for p in ckpt.iterdir()} - {f.name for f in fifos} - {"request.json"}
    assert leftovers == set()


def test_a_fifo_progress_file_without_a_root_does_not_hang_the_tail(tmp_path: Path) -> None:
    # Standalone mode: a container label names the progress file, no confining root.
    fifo = tmp_path / "progress.jsonl"
    os.mkfifo(fifo)
    tail = FileTail(fifo, root=None)
    out: list[list[bytes]] = []
    assert returns_within(lambda: out.append(tail.read_lines()), MAX_STALL_S, [fifo],
                          os.O_WRONLY), ("opening a FIFO progress file blocked the tail")
    assert out == [[]] and tail.stats.refused == 1
    tail.close()


def test_the_thread_hint_is_confined_like_the_request(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    (root / "ns").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "ns" / "ckpt").symlink_to(outside)  # the pod's checkpoint folder is a symlink
    for ckpt in (root / "ns" / "ckpt", root / "../outside"):
        agent = agent_following(root, ckpt)
        agent._hint_threads(CID, 1.0)
        assert agent.jobs[CID].threads_hint is None
    assert list(outside.iterdir()) == []
    inside = root / "ns" / "job"
    inside.mkdir()
    agent = agent_following(root, inside)
    os.mkfifo(inside / THREADS_FILE)  # replaced by the rename, never opened
    assert returns_within(lambda: agent._hint_threads(CID, 2.0), MAX_STALL_S,
                          [inside / THREADS_FILE], os.O_RDONLY)
    assert json.loads((inside / THREADS_FILE).read_bytes())["threads"] == 2
    assert agent.jobs[CID].threads_hint == 2
