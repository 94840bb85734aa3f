"""The agent's checkpoint proof (docs/training-contract.md §4): the agent writes the request
file, a real SDK Checkpointer honours it, and the heartbeat reports the checkpoint that
``saved.json`` names only once it verifies against its manifest; a corrupted one is never
reported."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

from specon.sdk import SAVED_FILE, Checkpointer, Reporter
from specon.wire import CheckpointRequest
from specon_agent.actuators.cgroup import CgroupActuator
from specon_agent.agent import Agent
from specon_agent.cpu import CpuMeter
from specon_agent.discovery import Target
from specon_agent.followed import FollowedJob
from specon_agent.loop_config import LoopConfig

CID = "c" * 64


def agent_following(directory: Path) -> Agent:
    agent = Agent(LoopConfig(node="node-a"), CgroupActuator(node_cpus=2), CpuMeter())
    target = Target(cid=CID, namespace="ns", pod="train-a", uid="uid-a",
                    checkpoint_dir=directory, migratable=True)
    # What arrive() sets up, without a limit write: there is no container behind this ID.
    agent.jobs[CID] = FollowedJob(target, None)
    agent.control.arrive(CID, 0.0, None)
    return agent


def job(directory: Path) -> Checkpointer:
    return Checkpointer(directory, handle_sigterm=False,
                        reporter=Reporter(directory / "progress.jsonl", io.StringIO()))


def reported(agent: Agent) -> dict[str, object] | None:
    [rep] = agent.heartbeat(1.0).jobs
    return None if rep.checkpoint is None else rep.checkpoint.model_dump()


def test_the_requested_checkpoint_is_reported_once_it_verifies(tmp_path: Path) -> None:
    agent = agent_following(tmp_path)
    ckpt = job(tmp_path)
    ckpt.step_end(1, {"w": 1})
    assert reported(agent) is None  # nothing saved yet
    agent._ask_checkpoint(CheckpointRequest(namespace="ns", pod="train-a", id="mig-1"))
    assert json.loads((tmp_path / "request.json").read_text()) == {"id": "mig-1",
                                                                  "exit": False}
    ckpt.step_end(2, {"w": 2})  # the job honours the request at its step boundary
    saved = json.loads((tmp_path / SAVED_FILE).read_text())
    manifest = json.loads((tmp_path / f"{saved['checkpoint']}.json").read_text())
    data = (tmp_path / manifest["file"]).read_bytes()
    assert reported(agent) == {
        "request": "mig-1", "name": "ckpt-000000002", "step": 2,
        "sha256": hashlib.sha256(data).hexdigest(), "time": saved["time"]}
    assert agent.metrics.checkpoints.labels("verified")._value.get() == 1
    assert reported(agent) is not None  # unchanged files: not hashed again
    assert agent.metrics.checkpoints.labels("verified")._value.get() == 1


def test_a_corrupted_checkpoint_is_never_reported(tmp_path: Path) -> None:
    agent = agent_following(tmp_path)
    ckpt = job(tmp_path)
    agent._ask_checkpoint(CheckpointRequest(namespace="ns", pod="train-a", id="mig-2"))
    ckpt.step_end(1, {"w": list(range(100))})
    assert reported(agent) is not None
    saved = json.loads((tmp_path / SAVED_FILE).read_text())
    manifest = json.loads((tmp_path / f"{saved['checkpoint']}.json").read_text())
    path = tmp_path / manifest["file"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different bytes
    path.write_bytes(bytes(data))
    assert reported(agent) is None
    assert agent.metrics.checkpoints.labels("rejected")._value.get() == 1
    path.unlink()  # the data file gone
    assert reported(agent) is None


def test_saved_json_that_disagrees_with_the_manifest_or_names_nothing_is_not_reported(
    tmp_path: Path
) -> None:
    agent = agent_following(tmp_path)
    ckpt = job(tmp_path)
    agent._ask_checkpoint(CheckpointRequest(namespace="ns", pod="train-a", id="mig-3"))
    ckpt.step_end(1, {"w": 1})
    saved = json.loads((tmp_path / SAVED_FILE).read_text())
    (tmp_path / SAVED_FILE).write_text(json.dumps({**saved, "sha256": "0" * 64}))
    assert reported(agent) is None
    (tmp_path / SAVED_FILE).write_text(json.dumps({**saved, "checkpoint": "ckpt-000000009"}))
    assert reported(agent) is None
    (tmp_path / SAVED_FILE).write_text("{not json")
    assert reported(agent) is None
    (tmp_path / SAVED_FILE).write_text(json.dumps(saved))  # back as the job wrote it
    assert reported(agent) is not None
