"""Helpers for the tests on the real Docker Engine: the engine, the local base image, a CPU burner.

No engine is a failure, not a skip, unless SPECON_SKIP_DOCKER=1 (hack/test.d/20-docker.sh starts
one and builds the image).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from docker.models.containers import Container

ROOT = Path(__file__).resolve().parents[1]
#: This pytest session's containers carry its own id: the session's clean-up removes them and
#: nothing else. The machine's engine is shared by several sessions at once, and a clean-up by
#: a bare label removed other sessions' running training containers mid-test.
SESSION_LABEL = {"org.specon.test.session": uuid.uuid4().hex}
LABEL = {"org.specon.test.kind": "docker", **SESSION_LABEL}
#: Options for every test container: labelled for clean-up, and no network (none is needed, and
#: the tests then run on an engine started without a bridge too).
RUN: dict[str, Any] = {"labels": LABEL, "network_mode": "none"}


def _skip_requested() -> bool:
    return os.environ.get("SPECON_SKIP_DOCKER") == "1"


@pytest.fixture(scope="session")
def engine() -> Iterator[docker.DockerClient]:
    if _skip_requested():
        pytest.skip("SPECON_SKIP_DOCKER=1")
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"no Docker Engine answers ({exc}); hack/test.sh starts one (20-docker.sh)")
    yield client
    # Whatever a failed test of this session left behind (every test container carries
    # SESSION_LABEL: here, in tests/deploy/test_images.py and test_prometheus.py).
    (key, value), = SESSION_LABEL.items()
    for container in client.containers.list(all=True, filters={"label": f"{key}={value}"}):
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:  # another session fixture is removing it now
            if exc.status_code != 409:
                raise
    client.close()


@pytest.fixture(scope="session")
def base_image(engine: docker.DockerClient) -> str:
    name = os.environ.get("SPECON_BASE_IMAGE") or (
        "specon-base:" + (ROOT / "hack/images/base-tag").read_text().strip()
    )
    try:
        engine.images.get(name)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {name} missing: run hack/images/build-base.sh")
    return name


# Two busy loops, so that any limit below two cores is what binds, not the program.
BURN = ["sh", "-c", "yes >/dev/null & yes >/dev/null & wait"]


@pytest.fixture
def burner(engine: docker.DockerClient, base_image: str) -> Iterator[Container]:
    """A running container that burns CPU, started at a 0.2-core quota so it never hogs the host."""
    container = engine.containers.run(
        base_image, BURN, detach=True, **RUN, cpu_period=100_000, cpu_quota=20_000
    )
    yield container
    with contextlib.suppress(docker.errors.NotFound):  # unless the test removed it
        container.remove(force=True)


def _sample(container: Container) -> tuple[int, datetime]:
    stats = container.stats(stream=False, one_shot=True)
    return stats["cpu_stats"]["cpu_usage"]["total_usage"], datetime.fromisoformat(stats["read"])


def measured_cores(container: Container, seconds: float = 3.0, windows: int = 1) -> list[float]:
    """The container's CPU use in cores over ``windows`` back-to-back windows of ``seconds``,
    from the engine's stats. Other load on a shared host can only lower a window's figure."""
    time.sleep(1.0)  # let a just-written limit take hold over a few CFS periods
    used0, at0 = _sample(container)
    cores = []
    for _ in range(windows):
        time.sleep(seconds)
        used1, at1 = _sample(container)
        cores.append((used1 - used0) / 1e9 / (at1 - at0).total_seconds())
        used0, at0 = used1, at1
    return cores
