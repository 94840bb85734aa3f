"""Node speeds from the ``specon.io/cpu-speed`` label (specon_manager.node_speed): the
progress-aware placement and moves compare nodes by them, an agent's work figures (CPU-seconds
of its own node) are scaled by its node's speed, and a label that is not a sane number counts
as none (logged once)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from managerlib import heartbeat, job

from specon.core.policy import lookup
from specon.cpu_speed import MAX_SPEED, MIN_SPEED, parse_cpu_speed
from specon.names import LABEL_CPU_SPEED
from specon.wire import Heartbeat
from specon_manager.node_speed import NodeSpeeds
from specon_manager.state import ClusterState, Reservation


@pytest.mark.parametrize(("value", "speed"), [
    ("1.5", 1.5), ("2", 2.0), (f"{MIN_SPEED}", MIN_SPEED), (f"{MAX_SPEED:g}", MAX_SPEED),
    ("0", None), ("-1", None), ("0.01", None), ("21", None), ("1e9", None), ("nan", None),
    ("inf", None), ("", None), ("fast", None), ("1" * 17, None), (1.5, None), (None, None),
])
def test_a_label_is_a_speed_only_when_it_is_a_number_within_the_bounds(
        value: Any, speed: float | None) -> None:
    assert parse_cpu_speed(value) == speed


def node(name: str, speed: str | None) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name} | ({LABEL_CPU_SPEED: speed} if speed else {})
    return {"metadata": {"name": name, "labels": labels}}


def test_a_node_without_a_sane_label_has_no_speed_and_a_bad_label_is_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    nodes = {"a": node("a", "2.5"), "b": node("b", None), "c": node("c", "1e6")}
    speeds = NodeSpeeds(nodes.get)
    with caplog.at_level(logging.WARNING, logger="specon.manager"):
        got = [speeds.speed(n) for n in ("a", "b", "c", "c", "unknown")]
    assert got == [2.5, None, None, None, None]
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "node c" in warned[0] and LABEL_CPU_SPEED in warned[0], warned


def state_with(speeds: dict[str, float] | None) -> ClusterState:
    state = ClusterState(stale_after_s=30, placement=lookup("progress").placement)
    if speeds is not None:
        state.node_speed = NodeSpeeds(
            {n: node(n, str(s)) for n, s in speeds.items()}.get).speed
    # the same CPUs; the slow node's job has fewer CPU-seconds left than the fast one's
    state.record(Heartbeat.model_validate(heartbeat("slow", [job("a", "PC", work_s=100.0,
                                                                 work_done_s=10.0)])))
    state.record(Heartbeat.model_validate(heartbeat("fast", [job("b", "PC", work_s=150.0)])))
    return state


def test_work_is_scaled_by_its_nodes_speed_and_placement_follows_the_labels() -> None:
    blind = state_with(None)
    # without labels every node is equally fast: the least CPU-seconds ahead wins
    assert blind.priorities(["slow", "fast"], 10)[0] == 10
    assert [n.speed for n in blind.node_loads(["slow", "fast"])] == [1.0, 1.0]
    labelled = state_with({"slow": 0.25, "fast": 4.0})
    loads = {n.name: n for n in labelled.node_loads(["slow", "fast"])}
    assert (loads["slow"].speed, loads["fast"].speed) == (0.25, 4.0)
    assert [(j.work, j.attained) for j in loads["slow"].jobs] == [(25.0, 2.5)]
    assert [j.work for j in loads["fast"].jobs] == [600.0]
    # 100 CPU-seconds of a core a quarter as fast are 25 of a speed-1 core, served at 1 per
    # second by its 4 CPUs; the fast node serves 16: it is the better host now
    assert labelled.priorities(["slow", "fast"], 10)[1] == 10


def test_a_job_on_its_way_counts_with_the_speed_of_the_node_that_measured_it() -> None:
    state = state_with({"slow": 0.25, "fast": 4.0})
    state.reserve(Reservation("default/a", "m-1", "fast", "slow", pod="default/a"))
    fast = state.node_loads(["fast"])[0]
    assert sorted(j.work for j in fast.jobs) == [25.0, 600.0]
