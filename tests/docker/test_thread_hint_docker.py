"""The thread hint on the real engine (docs/training-contract.md §8): a real PyTorch training
container started with more threads (4) than the CPU limit the agent then gives it; the agent writes
the CFS quota (`docker inspect`) and `threads.json` in the job's checkpoint directory (a bind
mount), and the job's SDK applies the count between steps (its `threads` events); when the
agent exits and restores the limit, the thread count follows back."""

from __future__ import annotations

import json
import time
from pathlib import Path

import docker
import pytest
from agentlib import quota, unique_label, wait_for
from dockerlib import LABEL, ROOT

from specon.sdk import THREADS_FILE
from specon_agent.actuators.docker import DockerActuator
from specon_agent.agent import Agent
from specon_agent.cpu import CpuMeter
from specon_agent.discovery import Arrived, DockerDiscovery
from specon_agent.loop_config import LoopConfig

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]

NODE_CPUS = 2.0  # the agent's view of the node: limits are fractions of it


def progress(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_throttled_job_follows_the_agents_thread_hint(
    engine: docker.DockerClient, base_image: str, tmp_path: Path
) -> None:
    label = unique_label()
    shared = tmp_path / "shared"
    shared.mkdir()
    container = engine.containers.run(
        base_image,
        ["python3", "-m", "specon_examples", "cnn", "--iterations", "100000",
         "--threads", "4", "--log-every", "2"],
        detach=True, network_mode="none", working_dir="/src",
        volumes={str(ROOT): {"bind": "/src", "mode": "ro"},
                 str(shared): {"bind": "/ckpt", "mode": "rw"}},
        environment={"PYTHONPATH": "/src", "SPECON_CHECKPOINT_DIR": "/ckpt/ck",
                     "SPECON_PROGRESS_FILE": "/ckpt/progress.jsonl"},
        labels={**LABEL, label: "true"}, cpu_period=100_000, cpu_quota=200_000,
    )
    try:
        records = shared / "progress.jsonl"
        wait_for("the job's first progress records",
                 lambda: sum(r["event"] == "progress" for r in progress(records)) >= 2,
                 240, lambda: container.logs().decode(errors="replace"))
        target = DockerDiscovery(engine, label).target(engine.api.inspect_container(container.id))
        assert target is not None and target.checkpoint_dir == shared / "ck"
        assert target.kind == base_image  # no specon.io/kind label: the container's image
        actuator = DockerActuator(engine, node_cpus=NODE_CPUS)
        agent = Agent(LoopConfig(node="hint"), actuator, CpuMeter())
        agent.handle(Arrived(target), time.time())
        # Held to one core of two (the QoS override is the agent's own path to a limit).
        agent.control.set_qos_limits({container.id: 0.5}, 0.0)
        agent.apply(time.time())
        assert quota(container) == 100_000  # one core, on the engine
        hint = json.loads((shared / "ck" / THREADS_FILE).read_text())
        assert hint["threads"] == 1 and hint["limit_cores"] == 1.0
        assert not [p for p in (shared / "ck").iterdir() if p.name.startswith(".tmp-")]

        def threads_events() -> list[int]:
            return [r["threads"] for r in progress(records) if r["event"] == "threads"]

        wait_for("the job to apply the hint", lambda: threads_events() == [1], 120,
                 lambda: container.logs().decode(errors="replace"))
        # Two cores again: the hint follows and so does the job (4 threads asked, 2 seen).
        agent.control.set_qos_limits({container.id: 1.0}, 0.0)
        agent.apply(time.time())
        assert quota(container) == 200_000
        wait_for("the job to follow the raised limit", lambda: threads_events() == [1, 2],
                 120, lambda: container.logs().decode(errors="replace"))
        # The job trains on after each change (its steps keep coming).
        last = max(r["step"] for r in progress(records) if r["event"] == "progress")
        wait_for("steps after the change", lambda: max(
            r["step"] for r in progress(records) if r["event"] == "progress") > last + 2,
            120, lambda: container.logs().decode(errors="replace"))
        container.reload()
        assert container.status == "running"
        # Down to one core again, then the agent exits: the limit it changed is restored
        # (two cores, as the container started) and so is the thread count.
        agent.control.set_qos_limits({container.id: 0.5}, 0.0)
        agent.apply(time.time())
        wait_for("the job to follow the lowered limit", lambda: threads_events() == [1, 2, 1],
                 120, lambda: container.logs().decode(errors="replace"))
        agent.close()
        assert quota(container) == 200_000
        wait_for("the job to follow the restored limit",
                 lambda: threads_events() == [1, 2, 1, 2], 120,
                 lambda: container.logs().decode(errors="replace"))
        assert not [r for r in progress(records) if r["event"] == "threads-rejected"]
    finally:
        container.remove(force=True)
