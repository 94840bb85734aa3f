"""How long a container waited for a CPU (its cgroup's PSI ``cpu.pressure``), read by the cgroup
actuator on the host's real hierarchy: a busy loop held to 0.2 core by its quota waits most of
the time, a loop that sleeps almost never. That difference is what lets the demand cap
(specon.core.job_loads.demand_cap) tell a job that does not need its cores from one that cannot
get them. On a hybrid v1 host the pressure is read from the unified hierarchy beside the
controllers, at the same path; on v2 from the container's own cgroup.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodelib import hierarchies

from specon.core.job_loads import demand_cap
from specon_agent.actuators.cgroup import CgroupActuator

BUSY = "while True: pass"
SLEEPY = "import time\nwhile True: time.sleep(0.05)"


def _roots() -> tuple[int, Path, list[Path]] | None:
    """(version, the cpu hierarchy, every hierarchy the containers are made in)."""
    found = hierarchies()
    unified = found.get("")
    v2 = unified is not None and "cpu" in (unified / "cgroup.controllers").read_text().split()
    if v2 and unified is not None:
        return 2, unified, [unified]
    cpu = next((p for c, p in found.items() if c and "cpu" in c.split(",")), None)
    if cpu is None or unified is None or not (unified / "cpu.pressure").exists():
        return None
    roots = [cpu, unified]
    if (cpu.parent / "cpuacct").is_dir() and cpu.name != "cpuacct":
        roots.append(cpu.parent / "cpuacct")
    return 1, cpu, roots


@pytest.fixture()
def containers() -> Iterator[tuple[CgroupActuator, dict[str, str]]]:
    """An actuator on the host's hierarchy, and the IDs of two containers in a kubelet-like
    folder: "busy" (held to 0.2 core) and "sleepy" (unlimited)."""
    layout = _roots()
    if layout is None:
        pytest.skip("no cgroup hierarchy with PSI cpu.pressure on this host (v2, or a hybrid "
                    "v1 host's unified mount): NOT run here")
    version, mount, roots = layout
    if os.geteuid() != 0 or not os.access(mount, os.W_OK):
        pytest.skip(f"cannot create cgroups under {mount} (needs root)")
    base = f"specon-psi-{os.getpid()}-{secrets.token_hex(3)}"
    ids = {"busy": secrets.token_hex(32), "sleepy": secrets.token_hex(32)}
    made: list[Path] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for root in roots:
            (root / base).mkdir()
            made.append(root / base)
            if version == 2:
                (root / base / "cgroup.subtree_control").write_text("+cpu")
            for cid in ids.values():
                (root / base / cid).mkdir()
                made.append(root / base / cid)
        busy = mount / base / ids["busy"]
        if version == 2:
            (busy / "cpu.max").write_text("20000 100000")
        else:
            (busy / "cpu.cfs_quota_us").write_text("20000")
        for name, code in (("busy", BUSY), ("sleepy", SLEEPY)):
            proc = subprocess.Popen([sys.executable, "-c", code])
            procs.append(proc)
            for root in roots:
                (root / base / ids[name] / "cgroup.procs").write_text(str(proc.pid))
        yield CgroupActuator(root=mount / base, version=version), ids
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        for d in reversed(made):
            if d.exists():
                d.rmdir()


def test_a_throttled_loop_waits_for_a_cpu_and_a_sleeping_one_does_not(
        containers: tuple[CgroupActuator, dict[str, str]]) -> None:
    actuator, ids = containers
    time.sleep(0.5)  # both started
    t0 = time.monotonic()
    before = {n: (actuator.cpu_wait_ns(c), actuator.cpu_usage_ns(c)) for n, c in ids.items()}
    time.sleep(3.0)
    window = time.monotonic() - t0
    waited, used = {}, {}
    for name, cid in ids.items():
        waited[name] = (actuator.cpu_wait_ns(cid) - before[name][0]) / 1e9 / window
        used[name] = (actuator.cpu_usage_ns(cid) - before[name][1]) / 1e9 / window
    # The kernel counts the quota's throttling as waiting: 0.2 core used, 42-80% waited
    assert waited["busy"] > 0.25, waited
    assert waited["sleepy"] < 0.1, waited
    # What the share rule does with it: the sleeper, under a limit of one core, is capped near
    # its use; the busy loop is held back and keeps the node's CPUs as its cap.
    assert demand_cap(used["sleepy"], 1.0, 2.0, waited["sleepy"]) < 0.5
    assert demand_cap(used["busy"], 0.2, 2.0, waited["busy"]) == 2.0
    # An unknown container ID is an error, not a zero
    with pytest.raises(Exception, match="no cgroup"):
        actuator.cpu_wait_ns(secrets.token_hex(32))
