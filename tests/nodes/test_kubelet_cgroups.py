"""The cgroup actuator under the kubelet's own layout: a busy pod started by a real kubelet
(cgroupfs driver, containerd, runc), found by the container ID in its pod status, held to a
lower quota that the kernel enforces, raised above its pod's limit (the pod's quota lifted)
and put back exactly as the kubelet set both. The systemd driver needs systemd as PID 1, which
this machine lacks (docs/testplane.md)."""

from __future__ import annotations

import json
import time

import pytest
from nodehelp import Cgroups, pods, running_container_id, wait_for
from nodelib import RealCluster

pytestmark = [pytest.mark.nodes, pytest.mark.plane, pytest.mark.slow]


def test_the_actuator_finds_throttles_lifts_and_restores_a_kubelet_container(
        cluster: RealCluster, namespace: str, node_images: dict[str, str]) -> None:
    node = cluster.node_names[0]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "busy"}, "spec": {
        "nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "burn", "image": node_images["base"],
                        "command": ["sh", "-c", "yes >/dev/null & yes >/dev/null & wait"],
                        "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                                      "limits": {"cpu": "500m", "memory": "64Mi"}}}]}}
    cluster.plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))
    cid = wait_for("the busy pod to run", lambda: next(
        (running_container_id(p) for p in pods(cluster, namespace)), None), timeout=120)

    cg = Cgroups()
    path = cg.path(cid)
    # The kubelet's cgroupfs layout: <root>/kubepods/<qos>/pod<uid>/<container id>.
    relative = path.relative_to(cg.root).parts
    assert relative[:2] == tuple(cluster.nodes[0].cgroup_root.strip("/").split("/"))
    assert relative[2:4] == ("kubepods", "burstable") and relative[4].startswith("pod")
    assert relative[5] == cid.split("://")[1]
    assert cg.quota(path) == 50_000 and cg.quota(path.parent) == 50_000  # what the kubelet set

    actuator = cg.finder
    n = actuator.node_cpus
    actuator.apply(cid, 0.2 / n)
    assert cg.quota(path) == 20_000 and cg.quota(path.parent) == 50_000
    used, throttled, t0 = actuator.cpu_usage_ns(cid), cg.throttled(path), time.monotonic()
    time.sleep(3)
    cores = (actuator.cpu_usage_ns(cid) - used) / 1e9 / (time.monotonic() - t0)
    assert cg.throttled(path) > throttled  # the kernel held it back
    assert cores <= 0.25, cores

    # Above the pod's 0.5 cores: cgroup v1 refuses that unless the pod's quota is lifted.
    actuator.apply(cid, 1.0 / n)
    assert cg.quota(path) == 100_000 and cg.quota(path.parent) is None
    assert actuator.restore_all() == {}
    assert cg.quota(path) == 50_000 and cg.quota(path.parent) == 50_000
