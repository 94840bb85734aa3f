"""Original limits that survive the agent (issue 15): recorded on disk before the first change,
restored by the next run. On real cgroups (the kernel's quota files) where this machine lets
the test make one, and on the file itself for its hostile shapes."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest
from test_actuators import own_cgroup  # noqa: F401  (the real-cgroup fixture)

from specon_agent.actuators.base import CpuLimit
from specon_agent.actuators.cgroup import CgroupActuator
from specon_agent.actuators.ledger import Ledger


def test_the_original_is_on_disk_before_the_write_and_gone_after_the_restore(
        own_cgroup, tmp_path: Path) -> None:  # noqa: F811
    cid, _, _ = own_cgroup
    file = tmp_path / "state" / "originals.json"
    owner = CgroupActuator()
    owner._write(cid, owner.read(cid), CpuLimit(50_000, 100_000))  # the owner's 0.5 core

    agent = CgroupActuator()
    agent.attach_ledger(Ledger.open(file))
    seen_on_disk: list[dict[str, object]] = []
    real_write = agent._write

    def write_and_look(c: str, before: CpuLimit, after: CpuLimit) -> None:
        seen_on_disk.append(json.loads(file.read_text())["originals"][c])
        real_write(c, before, after)

    agent._write = write_and_look  # type: ignore[method-assign]
    agent.apply(cid, 0.1 / agent.node_cpus)
    assert seen_on_disk == [{"quota_us": 50_000, "period_us": 100_000, "where": None}]
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    agent.apply(cid, 0.2 / agent.node_cpus)  # a second change keeps the first original
    assert json.loads(file.read_text())["originals"][cid]["quota_us"] == 50_000
    agent.restore(cid)
    assert agent.read(cid) == CpuLimit(50_000, 100_000)
    assert json.loads(file.read_text())["originals"] == {}


def test_a_killed_agent_s_successor_restores_the_owners_limit_not_its_own(
        own_cgroup, tmp_path: Path) -> None:  # noqa: F811
    """The failure of issue 15: after kill -9 a new agent took the throttled limit for the
    original and a clean stop left the container throttled. The first agent is dropped without
    restoring anything, which is all kill -9 leaves behind."""
    cid, _, _ = own_cgroup
    file = tmp_path / "originals.json"
    owner = CgroupActuator()
    owner._write(cid, owner.read(cid), CpuLimit(50_000, 100_000))

    first = CgroupActuator()
    first.attach_ledger(Ledger.open(file))
    first.apply(cid, 0.1 / first.node_cpus)
    assert first.read(cid) == CpuLimit(10_000, 100_000)
    del first  # killed: its memory is gone, the file stays

    # Without the file, the successor adopts the throttled limit as the owner's (the bug) ...
    amnesiac = CgroupActuator()
    amnesiac.apply(cid, 0.2 / amnesiac.node_cpus)
    amnesiac.restore_all()
    assert amnesiac.read(cid) == CpuLimit(10_000, 100_000)

    # ... with it, the successor puts back what the owner set, and the file empties.
    second = CgroupActuator()
    second.attach_ledger(Ledger.open(file))
    assert second.changed == frozenset({cid})
    assert second.restore_all() == {}
    assert second.read(cid) == CpuLimit(50_000, 100_000)
    assert Ledger.open(file).entries == {}


def test_a_gone_container_leaves_the_ledger(tmp_path: Path) -> None:
    file = tmp_path / "originals.json"
    ledger = Ledger(file)
    ledger.put("f" * 64, CpuLimit(None, 100_000))
    actuator = CgroupActuator(root=tmp_path, version=1, node_cpus=2)  # no such container
    actuator.attach_ledger(Ledger.open(file))
    assert actuator.restore_all() == {}
    assert Ledger.open(file).entries == {}


def test_the_resize_actuator_finds_its_pod_again_from_the_ledger(tmp_path: Path) -> None:
    from specon_agent.actuators.resize import ResizeActuator

    file = tmp_path / "originals.json"
    ledger = Ledger(file)
    ledger.put("c1", CpuLimit(100_000, 100_000), ("team-a", "train-0", "main"))
    actuator = ResizeActuator(4.0, "https://127.0.0.1:1")
    try:
        actuator.attach_ledger(Ledger.open(file))
        assert actuator._where["c1"].pod == "train-0"
    finally:
        actuator.close()


@pytest.mark.parametrize(("content", "why"), [
    (b"{not json", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b'{"version": 2, "originals": {}}', "not a version 1 ledger"),
    (b'[]', "not a version 1 ledger"),
    (b'{"version": 1, "originals": {"c": {"quota_us": true, "period_us": 100000}}}', "quota_us"),
    (b'{"version": 1, "originals": {"c": {"quota_us": -5, "period_us": 100000}}}', "quota_us"),
    (b'{"version": 1, "originals": {"c": {"quota_us": 5, "period_us": 10}}}', "period_us"),
    (b'{"version": 1, "originals": {"c": {"quota_us": 5, "period_us": 100000, '
     b'"where": ["a", "b"]}}}', "where"),
    (b'{"version": 1, "originals": {"c": 7}}', "bad record"),
])
def test_a_file_that_is_not_a_ledger_is_kept_aside_and_reported(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, why: str) -> None:
    file = tmp_path / "originals.json"
    file.write_bytes(content)
    with caplog.at_level(logging.ERROR):
        ledger = Ledger.open(file)
    assert ledger.entries == {}
    assert not file.exists()
    (aside,) = tmp_path.glob("originals.json.corrupt-*")
    assert aside.read_bytes() == content
    assert why in caplog.text and "cannot be restored automatically" in caplog.text


def test_a_symlink_a_fifo_and_a_huge_file_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text('{"version": 1, "originals": {}}')
    link = tmp_path / "link.json"
    link.symlink_to(secret)
    assert Ledger.open(link).entries == {}
    assert secret.exists() and not link.exists()  # the link was moved aside, not followed
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert Ledger.open(fifo).entries == {}  # a non-blocking open: no hang
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(5 << 20)
    assert Ledger.open(huge).entries == {}


@pytest.mark.parametrize("lifted", [
    {"../escape": {"quota_us": 50_000, "period_us": 100_000}},
    {"/abs/pod": {"quota_us": 50_000, "period_us": 100_000}},
    {"kubepods/../../x": {"quota_us": 50_000, "period_us": 100_000}},
    {"": {"quota_us": 50_000, "period_us": 100_000}},
    {"a//b": {"quota_us": 50_000, "period_us": 100_000}},
    {"a/./b": {"quota_us": 50_000, "period_us": 100_000}},
    {"x" * 2000: {"quota_us": 50_000, "period_us": 100_000}},
    {"/".join("d" * 9): {"quota_us": 50_000, "period_us": 100_000}},
    {"kubepods/pod1": {"quota_us": -5, "period_us": 100_000}},
    {"kubepods/pod1": 7},
    [],
])
def test_a_lifted_pod_record_that_could_leave_the_root_makes_the_file_unusable(
        tmp_path: Path, lifted: object) -> None:
    file = tmp_path / "originals.json"
    file.write_text(json.dumps({"version": 1, "originals": {}, "lifted": lifted}))
    ledger = Ledger.open(file)
    assert ledger.lifted == {} and ledger.entries == {}
    assert not file.exists()  # kept aside as .corrupt-<time>, never trusted


def test_a_lifted_pod_survives_in_the_file_and_an_old_file_reads_the_same(
        tmp_path: Path) -> None:
    file = tmp_path / "originals.json"
    ledger = Ledger(file)
    ledger.put("f" * 64, CpuLimit(50_000, 100_000))
    assert "lifted" not in json.loads(file.read_text())  # what an older agent wrote
    ledger.lift("kubepods/burstable/pod1", CpuLimit(100_000, 100_000))
    assert Ledger.open(file).lifted == {"kubepods/burstable/pod1": CpuLimit(100_000, 100_000)}
    ledger.settle("kubepods/burstable/pod1")
    assert Ledger.open(file).lifted == {}


def test_the_node_named_file_takes_over_an_earlier_release_s_one_once(tmp_path: Path) -> None:
    from specon_agent.__main__ import adopt_legacy

    legacy, mine = tmp_path / "originals.json", tmp_path / "originals-node-a.json"
    Ledger(legacy).put("f" * 64, CpuLimit(50_000, 100_000))
    adopt_legacy(mine)
    assert not legacy.exists() and set(Ledger.open(mine).entries) == {"f" * 64}
    Ledger(legacy).put("e" * 64, CpuLimit(50_000, 100_000))  # another node's, later: left alone
    adopt_legacy(mine)
    assert legacy.exists() and set(Ledger.open(mine).entries) == {"f" * 64}


def test_a_recorded_limit_that_cannot_go_back_is_counted_for_the_alert(tmp_path: Path) -> None:
    """SpeconLimitsNotRestored's counter: a start-up restore that fails is counted, and the
    record keeps the limit for the next start. The container's cgroup is a directory tree
    shaped like cgroup v2 whose cpu.max cannot be read or written (a directory): the fault a
    real cgroup does not produce on demand."""
    from specon_agent.__main__ import _restore_recorded
    from specon_agent.metrics import AgentMetrics

    cid = "a" * 64
    (tmp_path / "cg" / f"docker-{cid}.scope" / "cpu.max").mkdir(parents=True)
    file = tmp_path / "originals.json"
    Ledger(file).put(cid, CpuLimit(50_000, 100_000))
    metrics = AgentMetrics()
    failures = "specon_agent_limit_restore_failures_total"
    assert metrics.registry.get_sample_value(failures) == 0
    _restore_recorded(CgroupActuator(root=tmp_path / "cg", version=2, node_cpus=2), file,
                      metrics)
    assert metrics.registry.get_sample_value(failures) == 1
    assert cid in Ledger.open(file).entries  # kept for the next start
