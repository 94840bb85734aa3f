"""The agent end to end on the real engine (FlowCon in production): three real PyTorch training
containers started apart on this host, `specon-agent` in standalone mode. The converged job's
CFS quota is lowered and the young jobs' raised (`docker inspect`), measured CPU use follows
(the engine's stats), and when a job ends its limit is released and the others rise.

The jobs start a minute apart, as the issue asks; a 10 s interval (instead of the shipped
120 s) lets FlowCon act within the test's few minutes. The jobs are real training.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import docker
import docker.errors
import pytest
from agentlib import AgentProcess, agent_process, quota, training, unique_label, wait_for
from docker.models.containers import Container
from dockerlib import measured_cores

pytestmark = [pytest.mark.docker, pytest.mark.slow,
              pytest.mark.timeout(900)]

START_QUOTA = 100_000  # every job starts with one core of the two; NA-like equal shares
STAGGER_S = 60.0


def job_label(c: Container) -> dict[str, str]:
    """The labels of a job's series (namespace ``docker`` in standalone mode)."""
    return {"namespace": "docker", "pod": c.name, "container": "main"}


def limit(agent: AgentProcess, c: Container) -> float | None:
    return agent.sample("specon_agent_job_cpu_limit_cores", **job_label(c))


def flow_list(agent: AgentProcess, c: Container) -> str | None:
    for lst in ("NL", "WL", "CL"):
        if agent.sample("specon_agent_job_flowcon_list", **job_label(c), list=lst) == 1:
            return lst
    return None


def capped_windows(container: Container, n: int) -> list[tuple[float, int]]:
    """(cores used, quota) over ``n`` windows of 3 s, keeping those whose quota held."""
    out = []
    for _ in range(n):
        before = quota(container)
        used = measured_cores(container, seconds=3.0)[0]
        if quota(container) == before:
            out.append((used, before))
    return out


def test_converged_job_is_throttled_young_jobs_raised_and_limits_released_at_the_end(
    engine: docker.DockerClient, base_image: str, tmp_path: Path
) -> None:
    full = round(float(engine.info()["NCPU"]) * 100_000)
    label = unique_label()
    name = f"e2e-{label.rsplit('-', 1)[1]}"
    jobs: list[Container] = []
    args = ["--mode", "standalone", "--label", label, "--interval-s", "10", "--poll-s", "1",
            # The research's FlowCon parameters (the shipped ones are tuned for minutes-long
            # intervals, docs/parameters.md).
            "--alpha", "0.05", "--flowcon-alpha", "0.05", "--flowcon-beta", "2",
            "--node-name", "e2e"]
    try:
        with agent_process(args, tmp_path / "agent.log") as agent:
            for i, model in enumerate(("mlp", "vae", "gru")):
                if i:
                    time.sleep(STAGGER_S)
                c = training(engine, base_image, label, model, 200_000, "--log-every", "5",
                             name=f"{name}-{model}")
                jobs.append(c)
                wait_for(f"job {model} followed", lambda c=c: limit(agent, c) is not None,
                         60, agent.log)
                # The listener ran at once: the new job joined NL with the whole node, raised
                # from its start value.
                assert quota(c) == full > START_QUOTA

            def converged_beside_young() -> bool:
                q = {c.name: quota(c) for c in jobs}
                return (any(flow_list(agent, c) == "CL" and q[c.name] < START_QUOTA
                            for c in jobs)
                        and any(flow_list(agent, c) == "NL" and q[c.name] == full
                                for c in jobs))

            wait_for("a converged job throttled beside a young one at full node",
                     converged_beside_young, 300, agent.log)
            throttled = next(c for c in jobs if quota(c) < START_QUOTA)
            low = quota(throttled)
            # Never below FlowCon's floor of 1/(beta*n) of the node (beta=2, n=3).
            assert low >= round(full / 6) - 1
            assert limit(agent, throttled) == pytest.approx(low / 100_000, rel=0.01)
            assert agent.sample("specon_agent_job_category", **job_label(throttled),
                                category="PC") == 0  # it slowed down: watching or converged

            # CPU use follows the limit: CFS caps the throttled job in every window in which
            # its quota held (the agent may move it again on the next interval).
            windows = capped_windows(throttled, 4)
            assert windows, "the quota changed during every window"
            for used, q in windows:
                assert used <= 1.1 * q / 100_000 + 0.03, windows
            # ...and from below: it still gets about its share (best window; other load on a
            # shared host can only lower a window's figure).
            capped = [(used, q) for used, q in windows if q < START_QUOTA]
            if capped:
                assert max(used / (q / 100_000) for used, q in capped) >= 0.5, windows

            # A job ends while another is throttled: its limit is released, n falls to 2, and
            # the throttled one rises at once (the floor 1/(beta*n) grows from 1/6 to 1/4 of the
            # node, or everyone is free again when only CL jobs remain).
            def one_throttled_one_free() -> bool:
                q = [quota(c) for c in jobs]
                return min(q) < START_QUOTA and max(q) == full

            wait_for("a throttled job beside a free one", one_throttled_one_free, 240, agent.log)
            quotas = {c.name: quota(c) for c in jobs}
            ended = next(c for c in jobs if quotas[c.name] == full)
            throttled_now = [c for c in jobs if quotas[c.name] < START_QUOTA]
            ended.stop(timeout=5)
            wait_for("the ended job forgotten", lambda: limit(agent, ended) is None, 30,
                     agent.log)
            for c in throttled_now:
                wait_for(f"{c.name}'s quota to rise", lambda c=c: quota(c) > quotas[c.name],
                         10, agent.log)
                assert quota(c) >= round(full / 4) - 1
            assert agent.alive()
        # On a clean stop the agent put back the limits it changed.
        assert agent.proc.returncode == 0, agent.log()[-3000:]
        for c in jobs:
            if c is not ended:
                assert quota(c) == START_QUOTA, c.name
        assert "Traceback" not in agent.log()
    finally:
        for c in jobs:
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True)
