"""The progress-aware policy's node rule on the real engine: `specon-agent --policy
progress` in standalone mode, real PyTorch training containers (one thread each) and
Docker's CFS quotas. More jobs than cores: the jobs that declare little work left
(``specon.io/total-steps``) are given a core each, the ones with the most left are held at the
policy's floor, measured from each job's steps and CPU use (specon.core.job_loads.measured_load);
on a clean stop every quota is the owner's again."""

from __future__ import annotations

import contextlib
from pathlib import Path

import docker
import docker.errors
import pytest
from agentlib import agent_process, quota, training, unique_label, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


def test_the_jobs_with_least_work_left_get_the_cores(
    engine: docker.DockerClient, base_image: str, tmp_path: Path
) -> None:
    label = unique_label()
    name = f"progress-{label.rsplit('-', 1)[1]}"
    cpus = int(engine.info()["NCPU"])
    full = cpus * 100_000
    args = ["--mode", "standalone", "--label", label, "--poll-s", "1", "--interval-s", "10",
            "--policy", "progress", "--node-name", "progress"]
    jobs = []
    try:
        with agent_process(args, tmp_path / "agent.log") as agent:
            # every job runs far longer than the test; what they declare is what differs
            short = [training(engine, base_image, label, "mlp", 1_000_000, "--log-every", "20",
                              name=f"{name}-short{i}", quota_us=0,
                              extra_labels={"specon.io/total-steps": "3000"})
                     for i in range(cpus)]
            long = [training(engine, base_image, label, "mlp", 1_000_000, "--log-every", "20",
                             name=f"{name}-long{i}", quota_us=0,
                             extra_labels={"specon.io/total-steps": "1000000"})
                    for i in range(2)]
            jobs = short + long

            def divided() -> bool:
                q_short, q_long = [quota(c) for c in short], [quota(c) for c in long]
                return (all(q >= 0.8 * 100_000 for q in q_short)
                        and all(0 < q <= 0.1 * 100_000 for q in q_long))

            # a job is measured once it has logged steps (before, it is served first)
            wait_for("every job logging steps", lambda: all(
                b'"step":40,' in c.logs() for c in jobs), 240, agent.log)
            # ... and it holds, five checks in a row a second apart. For a few seconds after
            # the jobs are first measured a long job's first steps may come first (the early
            # key: a progressing job counts at most twice the work it has done), so the
            # division is waited for in its steady form, not at its first sight (a CI run saw
            # it appear, then a long job take a core for its first steps 3 s later).
            held = [0]

            def steady() -> bool:
                held[0] = held[0] + 1 if divided() else 0
                return held[0] >= 5

            wait_for("a core for each short job, the floor for the long ones, held 5 s",
                     steady, 90, agent.log)
            assert divided(), ([quota(c) for c in short], [quota(c) for c in long])
            assert "policy progress" in agent.log()
            assert all(quota(c) < full for c in jobs)
        log = agent.log()
        assert agent.proc.returncode == 0, log[-3000:]
        assert "Traceback" not in log
        # the owners' quotas (none) are back
        assert all(quota(c) <= 0 for c in jobs), [quota(c) for c in jobs]
    finally:
        for c in jobs:
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True)
