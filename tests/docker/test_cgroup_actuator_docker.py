"""The cgroup actuator on a real Docker container's cgroup, on this machine's real hierarchy:
found by ID, its quota written in the kernel's files, CPU use follows, a vanished cgroup is a
clear error. The v2 case runs on the real cgroup2 mount, as far as its controllers allow."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest
from docker.models.containers import Container
from dockerlib import measured_cores

from specon_agent.actuators import ActuatorUnavailable, ContainerGone, CpuLimit
from specon_agent.actuators.cgroup import CgroupActuator, cpu_cgroup_root

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def quota_file(path: Path, version: int) -> str:
    return (path / ("cpu.max" if version == 2 else "cpu.cfs_quota_us")).read_text().strip()


def test_cgroup_write_on_the_real_hierarchy(engine: docker.DockerClient, burner: Container) -> None:
    actuator = CgroupActuator()
    root, version = cpu_cgroup_root()
    assert (actuator.root, actuator.version) == (root, version)

    path = actuator.find(burner.id)
    assert path.is_dir() and burner.id in path.name
    assert actuator.find(burner.id[:12]) == path
    assert actuator.find(f"docker://{burner.id}") == path
    assert actuator.read(burner.id) == CpuLimit(20_000, 100_000)  # what the engine set

    # Below the engine's 0.2 cores, so the measured use tells whose quota the kernel applies.
    actuator.apply(burner.id, 0.1 / actuator.node_cpus)
    assert quota_file(path, version) == ("10000 100000" if version == 2 else "10000")
    burner.reload()
    assert burner.attrs["HostConfig"]["CpuQuota"] == 20_000  # the engine never hears of it
    used = measured_cores(burner, windows=2)
    assert max(used) <= 0.12, used  # under the new quota in every window
    assert max(used) >= 0.05, used

    used_before = actuator.cpu_usage_ns(burner.id)
    assert used_before > 0

    assert actuator.restore_all() == {}
    assert quota_file(path, version) == ("20000 100000" if version == 2 else "20000")

    actuator.apply(burner.id, 0.4 / actuator.node_cpus)
    burner.remove(force=True)
    with pytest.raises(ContainerGone) as gone:
        actuator.apply(burner.id, 0.2)
    assert gone.value.reason == "gone"
    with pytest.raises(ContainerGone):
        actuator.cpu_usage_ns(burner.id)
    assert actuator.restore_all() == {}  # nothing left to restore, and no crash


def test_rooted_at_the_containers_subtree_as_the_chart_mounts_it(
    engine: docker.DockerClient, burner: Container
) -> None:
    """The chart mounts only the pods' subtree (kubepods.slice, kubepods) and points the
    agent at it: rooted at the engine's own subtree here, the actuator finds, limits and
    meters the container as from the top of the hierarchy."""
    top = CgroupActuator()
    subtree = top.find(burner.id).parent  # .../docker (or system.slice): the engine's
    assert subtree != top.root
    actuator = CgroupActuator(root=subtree)
    assert actuator.version == top.version
    path = actuator.find(burner.id)
    assert path == top.find(burner.id)
    actuator.apply(burner.id, 0.1 / actuator.node_cpus)
    assert quota_file(path, actuator.version) == (
        "10000 100000" if actuator.version == 2 else "10000")
    assert actuator.cpu_usage_ns(burner.id) > 0
    assert actuator.restore_all() == {}


def _cgroup2_mount() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            return Path(left.split()[4])
    return None


def test_cgroup_v2_on_the_real_cgroup2_mount(
    engine: docker.DockerClient, burner: Container
) -> None:
    mount = _cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup2 mount on this machine")
    actuator = CgroupActuator(root=mount)
    assert actuator.version == 2
    path = actuator.find(burner.id)
    assert path.is_relative_to(mount) and burner.id in path.name
    # cpu.stat's usage is there in v2 whichever controllers are enabled.
    assert actuator.cpu_usage_ns(burner.id) > 0

    if "cpu" in (mount / "cgroup.controllers").read_text().split():
        actuator.apply(burner.id, 0.1 / actuator.node_cpus)
        assert quota_file(path, 2) == "10000 100000"
        assert max(measured_cores(burner, windows=2)) <= 0.12
    else:
        # A hybrid host: the cpu controller lives in v1, so v2 has no cpu.max to write.
        with pytest.raises(ActuatorUnavailable, match="cpu controller not enabled"):
            actuator.apply(burner.id, 0.3 / actuator.node_cpus)
