"""The Docker actuator on the real engine: the quota it writes shows in `docker inspect`, the
container's measured CPU use follows it, and a vanished container is a clear, countable error."""

from __future__ import annotations

import logging

import docker
import pytest
from docker.models.containers import Container
from dockerlib import BURN, RUN, measured_cores

from specon_agent.actuators import ContainerGone, CpuLimit
from specon_agent.actuators.docker import DockerActuator

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def host_config(container: Container) -> dict[str, int]:
    container.reload()
    return {k: container.attrs["HostConfig"][k] for k in ("CpuQuota", "CpuPeriod", "NanoCpus")}


def test_quota_is_written_inspected_and_cpu_use_follows(
    engine: docker.DockerClient, burner: Container, caplog: pytest.LogCaptureFixture
) -> None:
    actuator = DockerActuator(engine)
    assert actuator.node_cpus == engine.info()["NCPU"]
    low, high = 0.3, 1.0  # cores; the burner could use two

    with caplog.at_level(logging.INFO, logger="specon_agent.actuators"):
        change = actuator.apply(burner.id, low / actuator.node_cpus)
    assert change is not None
    assert change.before == CpuLimit(20_000, 100_000)
    assert change.after == CpuLimit(30_000, 100_000)
    assert "20000/100000us (0.200 cores) -> 30000/100000us (0.300 cores)" in caplog.text
    assert host_config(burner)["CpuQuota"] == 30_000
    # CFS holds use under the quota in every window; other load on a shared host can keep it
    # below, so the lower bounds look at the best of three windows.
    used_low = measured_cores(burner, windows=3)
    assert max(used_low) <= 1.1 * low + 0.02, used_low
    assert max(used_low) >= 0.5 * low, used_low

    actuator.apply(burner.id, high / actuator.node_cpus)
    assert host_config(burner)["CpuQuota"] == 100_000
    used_high = measured_cores(burner, windows=3)
    # Raised: clearly above what the old quota allowed, and still under the new one.
    assert max(used_high) <= 1.1 * high + 0.02, used_high
    assert max(used_high) >= 1.1 * low + 0.1, used_high


def test_no_write_when_unchanged_floor_holds_and_restore_puts_back(
    engine: docker.DockerClient, burner: Container
) -> None:
    actuator = DockerActuator(engine)
    n = actuator.node_cpus
    assert actuator.apply(burner.id, 0.2 / n) is None  # already 0.2 cores: nothing written
    assert actuator.changed == frozenset()

    floor = 0.1 / n
    change = actuator.apply(burner.id, 0.001, floor=floor)
    assert change is not None and change.after == CpuLimit(10_000, 100_000)
    assert host_config(burner)["CpuQuota"] == 10_000

    actuator.apply(burner.id, 0.35 / n)
    assert actuator.changed == {burner.id}
    assert actuator.restore_all() == {}
    assert host_config(burner)["CpuQuota"] == 20_000  # the value found before the first change
    assert actuator.changed == frozenset()


def test_container_limited_by_cpus_is_updated_through_nano_cpus(
    engine: docker.DockerClient, base_image: str
) -> None:
    container = engine.containers.run(
        base_image, ["sleep", "600"], detach=True, **RUN, nano_cpus=200_000_000
    )
    try:
        actuator = DockerActuator(engine)
        assert actuator.read(container.id) == CpuLimit(20_000, 100_000)
        actuator.apply(container.id, 0.5 / actuator.node_cpus)
        assert host_config(container) == {"CpuQuota": 0, "CpuPeriod": 0, "NanoCpus": 500_000_000}
        actuator.restore_all()
        assert host_config(container)["NanoCpus"] == 200_000_000
    finally:
        container.remove(force=True)


def test_unlimited_container_reads_unlimited_and_is_restored_unlimited(
    engine: docker.DockerClient, base_image: str
) -> None:
    container = engine.containers.run(base_image, ["sleep", "600"], detach=True, **RUN)
    try:
        actuator = DockerActuator(engine)
        assert actuator.read(container.id).quota_us is None
        actuator.apply(container.id, 0.25)
        assert host_config(container)["CpuQuota"] == round(0.25 * actuator.node_cpus * 100_000)
        actuator.restore_all()
        assert host_config(container)["CpuQuota"] in (0, -1)  # both mean no quota to the engine
        assert actuator.read(container.id).quota_us is None
    finally:
        container.remove(force=True)


def test_vanished_container_is_a_clear_error_and_does_not_stop_the_others(
    engine: docker.DockerClient, base_image: str, burner: Container
) -> None:
    doomed = engine.containers.run(base_image, BURN, detach=True, **RUN, cpu_quota=20_000)
    actuator = DockerActuator(engine)
    actuator.apply(doomed.id, 0.15 / actuator.node_cpus)
    doomed.remove(force=True)

    with pytest.raises(ContainerGone) as gone:
        actuator.apply(doomed.id, 0.1)
    assert gone.value.reason == "gone" and doomed.id[:12] in str(gone.value)

    # A batch where one container vanished: the other is still updated, decreases first.
    changes, failed = actuator.apply_many(
        {doomed.id: 0.3 / actuator.node_cpus, burner.id: 0.1 / actuator.node_cpus}
    )
    assert [c.container_id for c in changes] == [burner.id]
    assert set(failed) == {doomed.id} and failed[doomed.id].reason == "gone"
    assert host_config(burner)["CpuQuota"] == 10_000

    # Shutdown: the vanished one needs nothing, the live one is restored.
    assert actuator.restore_all() == {}
    assert host_config(burner)["CpuQuota"] == 20_000
