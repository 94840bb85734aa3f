"""Small helpers of the real-node tests: JSON from kubectl, waiting, a pod's cgroup files."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from imagelib import docker_build, image_context
from nodelib import IMAGE_LABEL, RealCluster, build_system_images
from planelib import REPO

from specon_agent.actuators.cgroup import CgroupActuator, cpu_cgroup_root

T = TypeVar("T")
#: The chart's appVersion: the tag of the project's images.
APP_VERSION = "0.1.0"
#: The registry the tests' images are named under (the user's own registry in the guide).
REGISTRY = "specon.test"


def build_node_images(bin_dir: Path, work: Path) -> dict[str, str]:
    """Every image the cluster runs, by role: pause and kube-scheduler from the plane's
    binaries, manager, agent and examples from the repository's Dockerfiles, and the base
    (``$SPECON_BASE_IMAGE``, else hack/images/base-tag's). Raises NodeError."""
    base = os.environ.get("SPECON_BASE_IMAGE") or (
        "specon-base:" + (REPO / "hack/images/base-tag").read_text().strip())
    images = build_system_images(bin_dir, base, work)
    ctx = image_context(work / "context")
    for role, dockerfile in (("manager", "Dockerfile.manager"), ("agent", "Dockerfile.agent"),
                             ("examples", "Dockerfile.examples")):
        tag = f"{REGISTRY}/specon/{role}:{APP_VERSION}"
        docker_build(ctx, dockerfile, tag, base, IMAGE_LABEL)
        images[role] = tag
    images["base"] = base
    return images


def get(cluster: RealCluster, *args: str) -> Any:
    return json.loads(cluster.plane.kubectl("get", *args, "-o", "json").stdout)


def pods(cluster: RealCluster, namespace: str, *selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get(cluster, "pods", "-n", namespace, *selector)["items"]
    return items


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 1.0,
             diagnose: Callable[[], str] | None = None) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{diagnose()}" if diagnose else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{extra}")
        time.sleep(every)


def running_container_id(pod: dict[str, Any], container: str | None = None) -> str | None:
    if pod["metadata"].get("deletionTimestamp"):
        return None
    for cs in pod.get("status", {}).get("containerStatuses") or []:
        if (container is None or cs["name"] == container) and "running" in (cs.get("state") or {}):
            cid = cs.get("containerID")
            return str(cid) if cid else None
    return None


class Cgroups:
    """The host's cpu hierarchy, read as the agent reads it (the project's CgroupActuator finds
    a container's cgroup by its ID under the kubelet's layout)."""

    def __init__(self) -> None:
        self.root, self.version = cpu_cgroup_root()
        self.finder = CgroupActuator(root=self.root, version=self.version)

    def path(self, container_id: str) -> Path:
        return self.finder.find(container_id)

    def quota(self, path: Path) -> int | None:
        """The CFS quota in microseconds per 100 ms period (None: unlimited)."""
        if self.version == 2:
            quota, period = (path / "cpu.max").read_text().split()
            return None if quota == "max" else int(quota) * 100_000 // int(period)
        quota_us = int((path / "cpu.cfs_quota_us").read_text())
        period_us = int((path / "cpu.cfs_period_us").read_text())
        return None if quota_us < 0 else quota_us * 100_000 // period_us

    def throttled(self, path: Path) -> int:
        stats = dict(line.split() for line in (path / "cpu.stat").read_text().splitlines())
        return int(stats["nr_throttled"])


def resumed_not_restarted(losses: list[tuple[int, float]], stop_step: int) -> str | None:
    """Why the loss curve of a job stopped at ``stop_step`` and restored does not look like
    it continued (None when it does). ``losses`` are its progress records' (step, loss), both
    runs together, in step order.

    A restart reports the untrained loss first: the run's first logged loss again, or near it.
    Continuing, the first loss after the restore is no higher than the losses logged just
    before the stop (their own spread, twice, is the noise allowed) and nearer the last of them
    than the run's first loss. It may be far lower: a move early in training lands on the
    steep part of the curve (seen: 2.45, 2.18 before a stop at step 20, then 1.29, 0.73, 0.32),
    so the window before the stop bounds it from above only."""
    before = [loss for step, loss in losses if step <= stop_step]
    after = [loss for step, loss in losses if step > stop_step]
    if not before or not after:
        return f"losses on both sides of step {stop_step} are needed: {losses}"
    first, last = before[0], before[-1]
    window = before[-5:]
    lo, hi = min(window), max(window)
    slack = 2 * (hi - lo) + 1e-3 * abs(first)
    if after[0] > hi + slack:
        return (f"the first loss after the restore, {after[0]:.4g}, lies above the losses "
                f"before the stop {window} by more than their noise ({slack:.3g})")
    if first > last and after[0] > (first + last) / 2:
        return (f"the first loss after the restore, {after[0]:.4g}, lies nearer the run's "
                f"first loss {first:.4g} than the last before the stop {last:.4g}")
    return None
