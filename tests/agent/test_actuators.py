"""Actuators without a container engine: the fraction-to-quota rule, ID matching, and the cgroup
actuator on a cgroup of its own made in this machine's real hierarchy (needs root)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from specon_agent.actuators import (
    ActuatorUnavailable,
    ContainerGone,
    CpuLimit,
    create,
)
from specon_agent.actuators.cgroup import CgroupActuator, _id_in_name, cpu_cgroup_root
from specon_agent.actuators.docker import DockerActuator

ID = "4f1c" + "0" * 56 + "beef"


def test_fraction_of_the_node_becomes_a_cfs_quota() -> None:
    actuator = CgroupActuator(node_cpus=4)
    assert actuator.limit_for(0.25) == CpuLimit(100_000, 100_000)  # one core of four
    assert actuator.limit_for(1.0).cores == 4.0
    assert actuator.limit_for(3.0) == actuator.limit_for(1.0)  # never more than the node
    assert actuator.limit_for(0.01, floor=0.125) == CpuLimit(50_000, 100_000)
    assert actuator.limit_for(1e-9) == CpuLimit(1_000, 100_000)  # the kernel's minimum
    assert CgroupActuator(node_cpus=2, period_us=50_000).limit_for(0.5) == CpuLimit(50_000, 50_000)
    for bad in (0.0, -0.1, float("nan")):
        with pytest.raises(ValueError):
            actuator.limit_for(bad)
    with pytest.raises(ValueError):
        actuator.limit_for(0.5, floor=1.5)


def test_unlimited_is_unlimited_whatever_the_period() -> None:
    assert CpuLimit(None, 100_000).same_as(CpuLimit(None, 50_000))
    assert not CpuLimit(None).same_as(CpuLimit(100_000))
    assert not CpuLimit(50_000, 100_000).same_as(CpuLimit(50_000, 50_000))
    assert str(CpuLimit(25_000)) == "25000/100000us (0.250 cores)"


@pytest.mark.parametrize(
    ("name", "found"),
    [
        (ID, ID),  # cgroupfs: docker/<id>, kubepods/<qos>/pod<uid>/<id>
        (f"docker-{ID}.scope", ID),  # systemd driver, Docker
        (f"cri-containerd-{ID}.scope", ID),
        (f"crio-{ID}.scope", ID),
        (f"crio-conmon-{ID}.scope", None),  # CRI-O's monitor, not the container
        ("kubepods-burstable-pod0f3b2c1a_9d8e_4c7b_a6f5_e4d3c2b1a098.slice", None),
        ("system.slice", None),
        ("docker", None),
    ],
)
def test_container_id_in_cgroup_names(name: str, found: str | None) -> None:
    assert _id_in_name(name) == found


def test_actuator_by_name() -> None:
    with pytest.raises(ValueError, match="choose one of docker, cgroup"):
        create("nope")


def test_engine_away_is_reported_as_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    # Real clients aimed at a socket nobody serves: the fault of an engine that is down.
    away_socket = "unix:///nonexistent/specon/docker.sock"
    monkeypatch.setenv("DOCKER_HOST", away_socket)
    with pytest.raises(ActuatorUnavailable, match="no Docker Engine answers"):
        DockerActuator()
    client = docker.DockerClient(base_url=away_socket, version="1.41")
    with pytest.raises(ActuatorUnavailable):
        DockerActuator(client)
    actuator = DockerActuator(client, node_cpus=2)
    with pytest.raises(ActuatorUnavailable) as away:
        actuator.apply(ID, 0.5)
    assert away.value.reason == "unavailable"


# The cgroup actuator on a real cgroup of its own, with a real busy process in it.


def writable_cpu_root() -> tuple[Path, int]:
    """The cpu hierarchy and its cgroup version, or skip where this test cannot make cgroups."""
    try:
        root, version = cpu_cgroup_root()
    except ActuatorUnavailable as exc:
        pytest.skip(str(exc))
    if os.geteuid() != 0 or not os.access(root, os.W_OK):
        pytest.skip(f"cannot create cgroups under {root} (needs root)")
    return root, version


@pytest.fixture
def own_cgroup() -> Iterator[tuple[str, CgroupActuator, subprocess.Popen[bytes]]]:
    """A cgroup named like a systemd Docker scope, holding a process that burns one core."""
    root, version = writable_cpu_root()
    cid = secrets.token_hex(32)
    parent = root / f"specon-test-{os.getpid()}"
    # On v1, CPU time is counted by cpuacct, which may be a hierarchy of its own.
    roots = [root]
    if version == 1 and (root.parent / "cpuacct").is_dir() and root.name != "cpuacct":
        roots.append(root.parent / "cpuacct")
    dirs = [r / parent.name / f"docker-{cid}.scope" for r in roots]
    if version == 2:
        parent.mkdir()
        (parent / "cgroup.subtree_control").write_text("+cpu")
    for d in dirs:
        d.mkdir(parents=True)
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for d in dirs:
            (d / "cgroup.procs").write_text(str(burner.pid))
        yield cid, CgroupActuator(), burner
    finally:
        burner.kill()
        burner.wait()
        for d in dirs:
            if d.exists():
                d.rmdir()
            if d.parent.exists():
                d.parent.rmdir()


def _throttled(path: Path) -> int:
    stats = dict(line.split() for line in (path / "cpu.stat").read_text().splitlines())
    return int(stats["nr_throttled"])


def test_cgroup_quota_is_enforced_by_the_kernel(
    own_cgroup: tuple[str, CgroupActuator, subprocess.Popen[bytes]],
) -> None:
    cid, actuator, _ = own_cgroup
    path = actuator.find(cid)
    assert actuator.read(cid).quota_us is None  # a new cgroup has no quota

    actuator.apply(cid, 0.1 / actuator.node_cpus)
    assert actuator.read(cid) == CpuLimit(10_000, 100_000)
    throttled_before = _throttled(path)
    used_before = actuator.cpu_usage_ns(cid)
    started = time.monotonic()
    time.sleep(2.0)
    cores = (actuator.cpu_usage_ns(cid) - used_before) / 1e9 / (time.monotonic() - started)
    assert _throttled(path) > throttled_before  # the kernel held it back
    assert cores <= 0.13, cores


def test_cgroup_skip_floor_period_and_restore(
    own_cgroup: tuple[str, CgroupActuator, subprocess.Popen[bytes]],
) -> None:
    cid, _, _ = own_cgroup
    actuator = CgroupActuator(period_us=50_000)
    n = actuator.node_cpus
    change = actuator.apply(cid, 0.01, floor=0.2 / n)
    assert change is not None and change.before.quota_us is None
    assert actuator.read(cid) == CpuLimit(10_000, 50_000)  # 0.2 cores at a 50 ms period
    assert actuator.apply(cid, 0.2 / n) is None  # unchanged: no write
    hesitant = CgroupActuator(period_us=50_000, min_step=0.1)
    assert hesitant.apply(cid, 0.21 / n) is None  # a 5% move is below the 10% step
    assert hesitant.apply(cid, 0.25 / n) is not None
    assert actuator.read(cid) == CpuLimit(12_500, 50_000)
    assert actuator.restore_all() == {}
    assert actuator.read(cid).quota_us is None
    assert actuator.changed == frozenset()


def test_vanished_cgroup_is_a_clear_error(
    own_cgroup: tuple[str, CgroupActuator, subprocess.Popen[bytes]],
) -> None:
    cid, actuator, burner = own_cgroup
    actuator.apply(cid, 0.3 / actuator.node_cpus)
    path = actuator.find(cid)
    burner.kill()
    burner.wait()
    path.rmdir()  # what the runtime does when a container ends
    with pytest.raises(ContainerGone) as gone:
        actuator.apply(cid, 0.2)
    assert gone.value.reason == "gone" and cid[:12] in str(gone.value)
    with pytest.raises(ContainerGone):
        actuator.read(cid)
    assert actuator.restore_all() == {}


def test_a_raise_above_the_pods_quota_lifts_it_and_restore_puts_it_back() -> None:
    """The kubelet's layout: the pod's cgroup holds the sum of its containers' limits. cgroup v1
    refuses a container quota above its parent's (EINVAL) and v2 caps it there, so a raise lifts
    the pod's quota, and restoring the container puts the pod's back."""
    root, version = writable_cpu_root()
    cid, other = secrets.token_hex(32), secrets.token_hex(32)
    pod = root / f"specon-test-{os.getpid()}-pod"
    if version == 2:
        pod.mkdir()
        (pod / "cgroup.subtree_control").write_text("+cpu")
    else:
        pod.mkdir()
    dirs = [pod / cid, pod / other]
    for d in dirs:
        d.mkdir()

    def quota(path: Path) -> str:
        if version == 2:
            return (path / "cpu.max").read_text().split()[0]
        return (path / "cpu.cfs_quota_us").read_text().strip()

    def set_quota(path: Path, value: int) -> None:
        name, text = ("cpu.max", f"{value} 100000") if version == 2 else (
            "cpu.cfs_quota_us", str(value))
        (path / name).write_text(text)

    try:
        # What the kubelet writes: the pod holds 0.5 + 0.25 cores, each container its own.
        set_quota(pod, 75_000)
        set_quota(pod / cid, 50_000)
        set_quota(pod / other, 25_000)
        actuator = CgroupActuator(node_cpus=2)
        actuator.apply(cid, 0.5)  # one whole core: above the pod's 0.75
        assert quota(pod / cid) == "100000"
        assert quota(pod) in ("-1", "max")
        actuator.apply(other, 0.5)  # a second container of the same pod, lifted already
        assert quota(pod / other) == "100000"
        actuator.restore(cid)
        assert quota(pod / cid) == "50000"
        assert quota(pod) in ("-1", "max")  # `other` is still above its owner's limit
        assert actuator.restore_all() == {}
        assert (quota(pod / cid), quota(pod / other), quota(pod)) == ("50000", "25000", "75000")

        # A lowering never touches the pod.
        actuator.apply(cid, 0.1)
        assert quota(pod) == "75000"
        assert actuator.restore_all() == {}
        # A container that ends while lifted: the pod's quota is put back when it is forgotten.
        actuator.apply(cid, 0.5)
        assert quota(pod) in ("-1", "max")
        set_quota(pod / cid, 50_000)  # (the runtime removing it would take the quota along)
        actuator.forget(cid)
        assert quota(pod) == "75000"
    finally:
        for d in dirs:
            d.rmdir()
        pod.rmdir()
