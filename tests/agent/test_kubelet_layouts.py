"""The cgroup actuator on the kubelet's cgroup layouts, built by the test on the host's real
hierarchy with a busy process inside: the cgroupfs driver's
``kubepods/burstable/pod<uid>/<id>`` and the systemd driver's
``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/
cri-containerd-<id>.scope``, each under cgroup v1 and v2 where the host has them.

The container is found by its ID, held below its limit (the kernel's ``nr_throttled`` grows and
its measured use stays near the quota), raised above its pod's limit (the pod's quota lifted)
and restored exactly. A real kubelet (cgroupfs driver, v1) makes this layout itself in
tests/nodes/test_kubelet_cgroups.py; the systemd driver needs systemd as PID 1, which the
development machine lacks, so its layout is made here. The v2 cases need a cgroup2 mount with
the ``cpu`` controller (marker ``cgroupv2``): on a hybrid v1 host they are skipped, and say why.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodelib import hierarchies

from specon_agent.actuators.cgroup import CgroupActuator


def _mounts() -> dict[int, Path]:
    """The cpu hierarchy of each cgroup version this host offers."""
    found: dict[int, Path] = {}
    for ctrl, point in hierarchies().items():
        if ctrl and "cpu" in ctrl.split(","):
            found.setdefault(1, point)
        elif not ctrl:
            controllers = point / "cgroup.controllers"
            if controllers.exists() and "cpu" in controllers.read_text().split():
                found.setdefault(2, point)
    return found


def _layout(driver: str, uid: str, cid: str) -> list[str]:
    if driver == "cgroupfs":
        return ["kubepods", "burstable", f"pod{uid}", cid]
    u = uid.replace("-", "_")
    return ["kubepods.slice", "kubepods-burstable.slice", f"kubepods-burstable-pod{u}.slice",
            f"cri-containerd-{cid}.scope"]


def _quota(path: Path, version: int) -> int | None:
    if version == 2:
        quota, period = (path / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) * 100_000 // int(period)
    quota_us = int((path / "cpu.cfs_quota_us").read_text())
    return None if quota_us < 0 else quota_us * 100_000 // int(
        (path / "cpu.cfs_period_us").read_text())


def _set_quota(path: Path, version: int, quota: int) -> None:
    if version == 2:
        (path / "cpu.max").write_text(f"{quota} 100000")
    else:
        (path / "cpu.cfs_quota_us").write_text(str(quota))


def _throttled(path: Path) -> int:
    stats = dict(line.split() for line in (path / "cpu.stat").read_text().splitlines())
    return int(stats["nr_throttled"])


@pytest.fixture(params=[
    pytest.param((1, "cgroupfs"), id="v1-cgroupfs"),
    pytest.param((1, "systemd"), id="v1-systemd"),
    pytest.param((2, "cgroupfs"), id="v2-cgroupfs", marks=pytest.mark.cgroupv2),
    pytest.param((2, "systemd"), id="v2-systemd", marks=pytest.mark.cgroupv2),
])
def kubelet_container(request: pytest.FixtureRequest
                      ) -> Iterator[tuple[int, Path, str, CgroupActuator]]:
    """(version, the container's cgroup, its ID, an actuator on the host's hierarchy) for a busy
    process in the kubelet's layout, the pod holding 0.5 cores and the container 0.5 cores."""
    version, driver = request.param
    mount = _mounts().get(version)
    if mount is None:
        pytest.skip(f"no cgroup v{version} hierarchy with the cpu controller on this host "
                    "(a hybrid v1 host's cgroup2 mount has none): NOT run here; it runs where "
                    "cgroup v2 has the cpu controller")
    if os.geteuid() != 0 or not os.access(mount, os.W_OK):
        pytest.skip(f"cannot create cgroups under {mount} (needs root)")
    cid = secrets.token_hex(32)
    base = mount / f"specon-layout-{os.getpid()}-{secrets.token_hex(3)}"
    parts = _layout(driver, str(uuid.uuid4()), cid)
    dirs = [base]
    for part in parts:
        dirs.append(dirs[-1] / part)
    roots = [mount]
    if version == 1 and (mount.parent / "cpuacct").is_dir() and mount.name != "cpuacct":
        roots.append(mount.parent / "cpuacct")  # CPU time is counted there on this layout
    made: list[Path] = []
    burner = None
    try:
        for root in roots:
            for d in dirs:
                target = root / d.relative_to(mount)
                target.mkdir()
                made.append(target)
                if version == 2 and d != dirs[-1]:
                    (target / "cgroup.subtree_control").write_text("+cpu")
        pod, container = dirs[-2], dirs[-1]
        _set_quota(pod, version, 50_000)
        _set_quota(container, version, 50_000)
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for root in roots:
            (root / container.relative_to(mount) / "cgroup.procs").write_text(str(burner.pid))
        yield version, container, cid, CgroupActuator(root=mount, version=version)
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
        for d in reversed(made):
            if d.exists():
                d.rmdir()


def test_the_actuator_on_the_kubelet_layout(
        kubelet_container: tuple[int, Path, str, CgroupActuator]) -> None:
    version, container, cid, actuator = kubelet_container
    assert actuator.find(cid) == container
    assert actuator.find(f"containerd://{cid}") == container
    pod = container.parent
    n = actuator.node_cpus

    actuator.apply(cid, 0.2 / n)
    assert _quota(container, version) == 20_000 and _quota(pod, version) == 50_000
    used, throttled, t0 = actuator.cpu_usage_ns(cid), _throttled(container), time.monotonic()
    time.sleep(2.5)
    cores = (actuator.cpu_usage_ns(cid) - used) / 1e9 / (time.monotonic() - t0)
    assert _throttled(container) > throttled  # the kernel held it back
    assert cores <= 0.25, cores

    actuator.apply(cid, 1.0 / n)  # one core: above the pod's 0.5
    assert _quota(container, version) == 100_000 and _quota(pod, version) is None
    assert actuator.restore_all() == {}
    assert _quota(container, version) == 50_000 and _quota(pod, version) == 50_000


def test_a_pod_lifted_by_a_killed_agent_is_put_back_by_its_successor(
        kubelet_container: tuple[int, Path, str, CgroupActuator], tmp_path: Path) -> None:
    """The first agent raises a container above its pod's quota (the pod's quota lifted) and is
    dropped without restoring anything, which is all kill -9 leaves behind; the next run, from
    the ledger alone, puts back the container's limit *and* the pod's quota."""
    from specon_agent.actuators.ledger import Ledger

    version, container, cid, first = kubelet_container
    pod, file = container.parent, tmp_path / "originals.json"
    first.attach_ledger(Ledger.open(file))
    first.apply(cid, 1.0 / first.node_cpus)
    assert _quota(pod, version) is None
    assert Ledger.open(file).lifted  # on disk before the agent could be killed

    second = CgroupActuator(root=first.root, version=version)
    second.attach_ledger(Ledger.open(file))
    assert second.restore_all() == {}
    assert _quota(container, version) == 50_000 and _quota(pod, version) == 50_000
    ledger = Ledger.open(file)
    assert ledger.entries == {} and ledger.lifted == {}
