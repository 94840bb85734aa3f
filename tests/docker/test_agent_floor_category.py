"""No category flapping on the real engine (issue 26): a steady job that had the node is held at
the progress-aware policy's CPU floor once shorter jobs arrive, and keeps its category for 10
intervals, because Algorithm 3 judges its progress per step, not per minute
(specon.core.growth.Pace).

The steady job is a real container under a real CFS quota: each step burns a fixed amount of
CPU and its loss falls by the same amount per step, so its progress per minute follows the CPU
it is given while its progress per step does not. α is 1 so that the per-minute rule would
demote it at the floor (a twentieth of its pace) within the test's few intervals of 4 s."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import docker
import docker.errors
import pytest
from agentlib import AgentProcess, agent_process, quota, training, unique_label, wait_for
from dockerlib import LABEL, ROOT

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

INTERVAL_S = 4.0
HELD_INTERVALS = 10

#: One step: a fixed amount of CPU work; the loss falls by the same amount every step.
STEADY = """
from specon.sdk import report
step = 0
while True:
    step += 1
    sum(i * i for i in range(20000))
    if step % 10 == 0:
        report(10.0 - 1e-4 * step, step=step)
"""


def category(agent: AgentProcess, name: str) -> str | None:
    for cat in ("PC", "WC", "CC"):
        if agent.sample("specon_agent_job_category", namespace="docker", pod=name,
                        container="main", category=cat) == 1:
            return cat
    return None


def test_steady_job_held_at_the_floor_keeps_its_category(
    engine: docker.DockerClient, base_image: str, tmp_path: Path
) -> None:
    label = unique_label()
    name = f"floor-{label.rsplit('-', 1)[1]}"
    cpus = int(engine.info()["NCPU"])
    args = ["--mode", "standalone", "--label", label, "--poll-s", "1",
            "--interval-s", str(INTERVAL_S), "--alpha", "1.0",
            "--policy", "specon+flowcon", "--node-name", "floor"]
    jobs = []
    try:
        with agent_process(args, tmp_path / "agent.log") as agent:
            steady = engine.containers.run(
                base_image, ["python3", "-c", STEADY], detach=True, network_mode="none",
                working_dir="/src", name=f"{name}-steady",
                volumes={str(ROOT): {"bind": "/src", "mode": "ro"}},
                environment={"PYTHONPATH": "/src"},
                labels={**LABEL, label: "true",
                        "specon.io/total-steps": "100000000"},
                cpu_period=100_000, cpu_quota=0)
            jobs.append(steady)
            # alone, it has the node and is judged progressing for a few intervals
            wait_for("the steady job progressing", lambda: category(agent, steady.name) == "PC",
                     60, agent.log)
            time.sleep(3 * INTERVAL_S)
            assert category(agent, steady.name) == "PC", agent.log()[-3000:]
            # shorter jobs, one per core, take the cores: the steady one is held at the floor
            jobs += [training(engine, base_image, label, "mlp", 1_000_000, "--log-every", "20",
                              name=f"{name}-short{i}", quota_us=0,
                              extra_labels={"specon.io/total-steps": "3000"})
                     for i in range(cpus)]
            wait_for("the steady job at the floor", lambda: 0 < quota(steady) <= 10_000, 120,
                     agent.log)
            seen = []
            t_end = time.monotonic() + HELD_INTERVALS * INTERVAL_S + 1.0
            while time.monotonic() < t_end:
                seen.append((category(agent, steady.name), quota(steady),
                             agent.sample("specon_agent_job_growth_per_minute", namespace="docker",
                                          pod=steady.name, container="main")))
                time.sleep(1.0)
            held = sum(1 for _, q, _ in seen if 0 < q <= 10_000)
            assert held >= 0.9 * len(seen), seen  # it was held at the floor throughout
            assert {c for c, _, _ in seen} == {"PC"}, (seen, agent.log()[-3000:])
            demoted = [line for line in agent.log().splitlines()
                       if steady.name in line and "category PC -> " in line
                       and "category PC -> PC" not in line]
            assert not demoted, demoted
        log = agent.log()
        assert agent.proc.returncode == 0, log[-3000:]
        assert "Traceback" not in log
    finally:
        for c in jobs:
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True)
