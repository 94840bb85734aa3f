"""The agent reporting to the real manager (its FastAPI app under uvicorn) while it controls real
containers: heartbeats carry every job's category, limit and CPU use, the manager's parameters
are adopted, and a job that converged on a crowded node is sent as a reallocation request at
once, before the next heartbeat."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from agentlib import agent_process, unique_label, wait_for
from docker.models.containers import Container
from dockerlib import LABEL
from servelib import serve

from specon_manager.app import create_app
from specon_manager.auth import NodeTokens
from specon_manager.settings import ManagerSettings

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(300)]

TOKEN = "agent-manager-test-token-0123456789"
# Converges within seconds, then stays flat.
CONVERGING = ("import math, time\n"
              "for i in range(10**6):\n"
              "    print(f'loss={math.exp(-i / 30) + 0.5:.6f}', flush=True); time.sleep(0.1)\n")
# Keeps improving steadily for minutes.
IMPROVING = ("import time\n"
             "for i in range(10**6):\n"
             "    print(f'loss={1000 - i:.1f}', flush=True); time.sleep(0.1)\n")


@contextlib.contextmanager
def manager() -> Iterator[tuple[str, Any]]:
    settings = ManagerSettings(kubernetes=False, migration=False, alpha=0.05, interval_s=3.0,
                               flowcon_alpha=0.05, flowcon_beta=2.0)
    app = create_app(settings, tokens=NodeTokens({TOKEN: "worker-1"}))
    with serve(app) as url:
        yield url, app


def test_heartbeats_and_an_immediate_reallocation_request_reach_the_manager(
    engine: docker.DockerClient, base_image: str, tmp_path: Path
) -> None:
    label = unique_label()
    token = tmp_path / "token"
    token.write_text(TOKEN)
    made: list[Container] = []
    try:
        with manager() as (url, app):
            args = ["--label", label, "--node-name", "worker-1", "--manager-url", url,
                    "--token-file", str(token), "--heartbeat-s", "1", "--poll-s", "0.5",
                    "--interval-s", "30", "--flowcon-interval-s", "3"]
            with agent_process(args, tmp_path / "agent.log") as agent:
                for code in (CONVERGING, IMPROVING, IMPROVING):
                    made.append(engine.containers.run(
                        base_image, ["python3", "-c", code], detach=True,
                        network_mode="none", labels={**LABEL, label: "true"}))
                state = app.state.cluster

                def reported() -> bool:
                    hb = state.heartbeat("worker-1")
                    return hb is not None and len(hb.jobs) == 3

                wait_for("a heartbeat with the three jobs", reported, 60, agent.log)
                hb = state.heartbeat("worker-1")
                assert hb.capacity_cpus == float(engine.info()["NCPU"])
                assert hb.actuator == "docker"
                assert {j.pod for j in hb.jobs} == {c.name for c in made}
                assert all(0 < j.limit <= 1 for j in hb.jobs)

                def asked() -> bool:
                    return (agent.sample("specon_agent_manager_requests_total",
                                         kind="reallocation", outcome="ok") or 0) >= 1

                # The manager's interval (3 s) replaced the agent's own (30 s): without it no
                # categorisation would happen within this wait.
                wait_for("a reallocation request answered", asked, 90, agent.log)
                assert "reallocation of docker/" + made[0].name in agent.log()
                assert "migration is disabled" in agent.log()  # the manager's answer
                hb = state.heartbeat("worker-1")
                cats = {j.pod: j.category.value for j in hb.jobs}
                assert cats[made[0].name] == "CC", cats
                assert agent.alive()
    finally:
        for c in made:
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True)
