"""Dockerfile.manager and Dockerfile.agent built by the real Docker Engine on the local base
image (no registry here: the wheels are downloaded on the host and put in the context, the
offline path the Dockerfiles support); each container starts, runs as the user the image says,
and turns healthy by the image's own HEALTHCHECK."""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from dockerlib import SESSION_LABEL
from imagelib import image_context
from planelib import free_port

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LABEL = {"org.specon.test.kind": "images", **SESSION_LABEL}


@pytest.fixture(scope="session")
def context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build context like the repository's, plus wheels/ (tests/imagelib.py)."""
    return image_context(tmp_path_factory.mktemp("image-context"))


def build(engine: Any, context: Path, dockerfile: str, base: str, tag: str) -> Any:
    import docker

    try:
        image, _ = engine.images.build(path=str(context), dockerfile=dockerfile, tag=tag,
                                       buildargs={"BASE": base}, rm=True, forcerm=True,
                                       labels=LABEL,
                                       # offline (the wheels are in the context), so an
                                       # engine without its default bridge builds too
                                       network_mode="none")
    except docker.errors.BuildError as exc:
        log = "".join(str(c.get("stream", c.get("error", ""))) for c in exc.build_log)
        pytest.fail(f"{dockerfile} did not build:\n{log[-4000:]}")
    return image


def wait_healthy(container: Any, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    status = "?"
    while time.monotonic() < deadline:
        container.reload()
        state = container.attrs["State"]
        if not state["Running"]:
            break
        status = state.get("Health", {}).get("Status", "none")
        if status == "healthy":
            return
        time.sleep(1)
    logs = container.logs().decode(errors="replace")[-3000:]
    pytest.fail(f"{container.name} not healthy (health {status}, state "
                f"{container.attrs['State']['Status']}):\n{logs}")


def http_get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status, resp.read().decode()


def test_manager_image_builds_starts_and_answers_its_health_check(
        engine: Any, context: Path, base_image: str) -> None:
    image = build(engine, context, "Dockerfile.manager", base_image, "specon/manager:test")
    cfg = image.attrs["Config"]
    assert cfg["User"] == "10001:10001"
    assert cfg["Healthcheck"]["Test"][0] == "CMD"
    port = free_port()
    # Host network: the check then works on an engine started without a bridge, too.
    container = engine.containers.run(
        image.id, detach=True, network_mode="host", labels=LABEL,
        environment={"SPECON_MANAGER_PORT": str(port), "SPECON_MANAGER_KUBERNETES": "false"})
    try:
        wait_healthy(container)
        assert http_get(f"http://127.0.0.1:{port}/healthz") == (200, "ok")
        status, metrics = http_get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and "specon_manager_extender_requests_total" in metrics
        assert container.exec_run("id -u").output.decode().strip() == "10001"
    finally:
        container.remove(force=True)


def test_agent_image_builds_starts_and_answers_its_health_check(
        engine: Any, context: Path, base_image: str) -> None:
    image = build(engine, context, "Dockerfile.agent", base_image, "specon/agent:test")
    assert image.attrs["Config"]["User"] == "10001:10001"
    socket = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not socket.startswith("unix://"):
        pytest.skip(f"the engine is not on a local socket ({socket})")
    path = socket[len("unix://"):]
    port = free_port()
    # Standalone mode with the docker actuator: the engine's socket, as uid 0 (the socket is
    # root's), exactly what the chart's DaemonSet gives it with agent.actuator=docker.
    container = engine.containers.run(
        image.id, detach=True, network_mode="host", labels=LABEL, user="0",
        volumes={path: {"bind": "/var/run/docker.sock", "mode": "rw"}},
        environment={"SPECON_AGENT_METRICS_PORT": str(port), "SPECON_AGENT_MODE": "standalone",
                     "SPECON_AGENT_ACTUATOR": "docker", "SPECON_AGENT_NODE_NAME": "image-test"})
    try:
        wait_healthy(container)
        status, metrics = http_get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and "specon_agent_node_cpus" in metrics
    finally:
        container.remove(force=True)
