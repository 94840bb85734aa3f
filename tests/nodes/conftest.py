"""Fixtures of the real-node tests: the images (built on the local engine from the local base)
and a cluster of two real nodes (tests/nodelib.py) on a plane of its own."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from nodehelp import build_node_images, get, wait_for
from nodelib import NodeError, RealCluster, missing_requirements
from planelib import require_bin_dir

_CLUSTERS: list[RealCluster] = []


def _skip_or_fail(why: str) -> None:
    ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    if os.environ.get("SPECON_SKIP_NODES") == "1" and not ci:
        pytest.skip(f"SPECON_SKIP_NODES=1: {why}")
    pytest.fail(why + " (set SPECON_SKIP_NODES=1 to skip the tests marked nodes; CI never "
                "skips them)", pytrace=False)


@pytest.fixture(scope="session")
def node_images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every image the cluster runs, by role: pause and kube-scheduler from the plane's
    binaries, manager, agent and examples from the repository's Dockerfiles, and the base."""
    if os.environ.get("SPECON_SKIP_NODES") == "1":
        _skip_or_fail("real nodes skipped on request")
    if os.environ.get("SPECON_SKIP_DOCKER") == "1":
        _skip_or_fail("SPECON_SKIP_DOCKER=1: the nodes' images are built on the Docker Engine")
    try:
        return build_node_images(require_bin_dir(), tmp_path_factory.mktemp("node-images"))
    except NodeError as exc:
        _skip_or_fail(str(exc))
        raise


@pytest.fixture(scope="session")
def cluster(node_images: dict[str, str],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    problems = missing_requirements()
    if problems:
        _skip_or_fail("cannot run real nodes here: " + "; ".join(problems))
    images = [v for k, v in node_images.items() if k != "pause"]
    c = RealCluster.start(require_bin_dir(), tmp_path_factory.mktemp("nodes"), images)
    _CLUSTERS.append(c)
    try:
        yield c
    finally:
        c.stop()


def leftovers(cluster: RealCluster) -> list[str]:
    """Pods still ending from an earlier test: deleted, or in a namespace being deleted."""
    ending = {n["metadata"]["name"] for n in get(cluster, "namespaces")["items"]
              if (n.get("status") or {}).get("phase") == "Terminating"}
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in get(cluster, "pods", "-A")["items"]
            if p["metadata"].get("deletionTimestamp") or p["metadata"]["namespace"] in ending]


@pytest.fixture(autouse=True)
def earlier_tests_gone(request: pytest.FixtureRequest) -> None:
    """A test on the shared cluster starts once the pods of the tests before it are gone (they
    delete their namespace without waiting): an agent follows a pod to its end, so a leftover
    would be one more job in what the next test counts (`specon whatif` did, 2026-11-27)."""
    if "cluster" not in request.fixturenames:
        return
    c: RealCluster = request.getfixturevalue("cluster")
    wait_for("the pods of earlier tests to be gone", lambda: not leftovers(c), timeout=300,
             every=2, diagnose=lambda: ", ".join(leftovers(c)))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The end-to-end test last: its jobs take a minute to end after it deletes their namespace,
    which the next real-node test would spend waiting (earlier_tests_gone); nothing waits after
    the last one (issue 27)."""
    items.sort(key=lambda item: item.path.name == "test_e2e.py"
               and item.path.parent.name == "nodes")


@pytest.fixture
def namespace(cluster: RealCluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    cluster.plane.kubectl("create", "namespace", name)
    yield name
    cluster.plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and "cluster" in getattr(item, "fixturenames", ()) and _CLUSTERS:
        report.sections.append(("real nodes' logs (last lines)", _CLUSTERS[-1].log_tails()))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for c in _CLUSTERS:
        terminalreporter.write_line(
            f"real nodes: started in {c.startup_seconds:.1f} s ({c.describe()}; logs under "
            f"{c.workdir})")

