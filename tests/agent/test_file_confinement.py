"""Issue 14, the agent side, on real files: a pod's annotations cannot make the agent read or
write outside the shared root (``..``, symlinks), nor stall it (a FIFO, ``/dev/zero``), nor grow
its memory (a 1 GiB checkpoint is hashed in chunks); each refusal is counted in
``specon_agent_file_refusals_total`` and logged."""

from __future__ import annotations

import hashlib
import io
import json
import os
import resource
import time
from pathlib import Path

import pytest

from specon.sdk import SAVED_FILE, Checkpointer, Reporter
from specon.wire import CheckpointRequest
from specon_agent.actuators.cgroup import CgroupActuator
from specon_agent.agent import Agent
from specon_agent.cpu import CpuMeter
from specon_agent.discovery import Target
from specon_agent.followed import FollowedJob
from specon_agent.loop_config import LoopConfig

CID = "c" * 64


def follow(root: Path, ckpt: Path | None = None, progress: Path | None = None,
           regex: str | None = None, **config: int) -> Agent:
    agent = Agent(LoopConfig(node="node-a", **config), CgroupActuator(node_cpus=2), CpuMeter())
    target = Target(cid=CID, namespace="ns", pod="train-a", uid="uid-a", checkpoint_dir=ckpt,
                    progress_path=progress, file_root=root, migratable=True, loss_regex=regex)
    agent.jobs[CID] = FollowedJob(target, agent._source(target))
    agent.control.arrive(CID, 0.0, None)
    return agent


def refusals(agent: Agent, what: str) -> float:
    return float(agent.metrics.confinement_refusals.labels(what)._value.get())


def reported(agent: Agent) -> object:
    [rep] = agent.heartbeat(1.0).jobs
    return rep.checkpoint


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "shared"
    (root / "ns" / "job").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "node-b-token").write_text("12345678901234567890\n")
    return root, outside


def test_progress_file_traversal_is_no_read_oracle(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    attack = root / f"../../../../../..{outside}/node-b-token"  # the annotation, joined
    agent = follow(root, progress=attack, regex=r"(?P<loss>\d+)")
    for _ in range(3):
        agent._poll_one(CID)
    assert agent.jobs[CID].source is not None
    assert agent.jobs[CID].source.last_loss is None  # the digits never came back as a loss
    assert refusals(agent, "progress") == 1  # counted once per job, not per poll


def test_a_symlinked_progress_file_is_refused(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    link = root / "ns" / "job" / "progress.jsonl"
    link.symlink_to(outside / "node-b-token")
    agent = follow(root, progress=link, regex=r"(?P<loss>\d+)")
    agent._poll_one(CID)
    assert agent.jobs[CID].source is not None and agent.jobs[CID].source.last_loss is None
    assert refusals(agent, "progress") == 1


@pytest.mark.parametrize("how", ["traversal", "symlink"])
def test_request_json_is_never_written_outside_the_root(tree: tuple[Path, Path],
                                                        how: str) -> None:
    root, outside = tree
    if how == "traversal":
        ckpt = root / "../outside"
    else:
        ckpt = root / "ns" / "ckpt"
        ckpt.symlink_to(outside)
    agent = follow(root, ckpt=ckpt)
    agent._ask_checkpoint(CheckpointRequest(namespace="ns", pod="train-a", id="mig-1"))
    assert not (outside / "request.json").exists()
    assert refusals(agent, "checkpoint") == 1


def checkpoint(directory: Path) -> Path:
    """A real SDK checkpoint; returns its data file."""
    ck = Checkpointer(directory, handle_sigterm=False,
                      reporter=Reporter(directory / "progress.jsonl", io.StringIO()))
    ck.step_end(1, {"w": 1})
    ck.save({"w": 1}, 1)
    saved = json.loads((directory / SAVED_FILE).read_text())
    manifest = json.loads((directory / f"{saved['checkpoint']}.json").read_text())
    return directory / str(manifest["file"])


def test_a_fifo_checkpoint_does_not_hang_the_agent(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    ckpt = root / "ns" / "job"
    data = checkpoint(ckpt)
    agent = follow(root, ckpt=ckpt)
    assert reported(agent) is not None
    data.unlink()
    os.mkfifo(data)  # no writer: a blocking open or read would stall the loop for good
    assert reported(agent) is None
    assert refusals(agent, "checkpoint") == 1


def test_dev_zero_and_files_outside_the_folder_are_refused(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    ckpt = root / "ns" / "job"
    data = checkpoint(ckpt)
    agent = follow(root, ckpt=ckpt)
    data.unlink()
    data.symlink_to("/dev/zero")
    assert reported(agent) is None
    saved = json.loads((ckpt / SAVED_FILE).read_text())
    mpath = ckpt / f"{saved['checkpoint']}.json"
    manifest = json.loads(mpath.read_text())
    mpath.write_text(json.dumps({**manifest, "file": "../../../../../../dev/zero"}))
    assert reported(agent) is None
    assert refusals(agent, "checkpoint") == 2


def _big(ckpt: Path, size: int, declared: int) -> str:
    """A sparse data file of ``size`` bytes under a valid saved.json naming ``declared``."""
    data = checkpoint(ckpt)
    with open(data, "r+b") as f:
        f.truncate(size)
    h = hashlib.sha256()
    with open(data, "rb") as f:
        while b := f.read(1 << 20):
            h.update(b)
    digest = h.hexdigest()
    saved = json.loads((ckpt / SAVED_FILE).read_text())
    mpath = ckpt / f"{saved['checkpoint']}.json"
    manifest = json.loads(mpath.read_text())
    mpath.write_text(json.dumps({**manifest, "bytes": declared, "sha256": digest}))
    (ckpt / SAVED_FILE).write_text(json.dumps({**saved, "sha256": digest}))
    return digest


def test_a_1_gib_checkpoint_is_hashed_without_growing_memory(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    ckpt = root / "ns" / "job"
    digest = _big(ckpt, 1 << 30, 1 << 30)
    agent = follow(root, ckpt=ckpt)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    deadline = time.monotonic() + 120
    rep = reported(agent)  # hashed by a worker thread: not verified until it is done
    while rep is None and time.monotonic() < deadline:
        rep = reported(agent)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert rep is not None and rep.sha256 == digest  # type: ignore[attr-defined]
    assert grown_kib < 64 * 1024, f"peak RSS grew {grown_kib} KiB hashing 1 GiB"


def test_a_checkpoint_over_its_declared_size_or_the_cap_is_refused_unread(
    tree: tuple[Path, Path]
) -> None:
    root, _ = tree
    ckpt = root / "ns" / "job"
    _big(ckpt, 1 << 30, 1000)  # the manifest says 1000 bytes; the file is 1 GiB
    agent = follow(root, ckpt=ckpt)
    assert reported(agent) is None
    assert refusals(agent, "checkpoint") == 1
    _big(ckpt, 1 << 20, 1 << 20)  # honest, but over this agent's cap
    capped = follow(root, ckpt=ckpt, checkpoint_max_bytes=1 << 19)
    assert reported(capped) is None
    assert refusals(capped, "checkpoint") == 1
