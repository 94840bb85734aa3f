"""Node speeds from the ``specon.io/cpu-speed`` label (specon_manager.node_speed): the
progress-aware placement and moves compare nodes by them, an agent's work figures (CPU-seconds
of its own node) are scaled by its node's speed, and a label that is not a sane number counts
as none (logged once)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from managerlib import Clock, heartbeat, job
from pydantic import ValidationError

from specon.core.policy import lookup
from specon.cpu_speed import MAX_SPEED, MIN_SPEED, parse_cpu_speed
from specon.names import LABEL_CPU_SPEED
from specon.wire import Heartbeat
from specon_manager.node_speed import NodeSpeeds, measured_scale
from specon_manager.state import SCALE_EVERY_S, ClusterState, Reservation
from specon_manager.status import _speed as status_speed


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


def test_an_unlabelled_node_is_taken_at_the_speed_its_agent_measured_and_a_label_wins() -> None:
    state = ClusterState(stale_after_s=30, placement=lookup("progress").placement)
    state.node_speed = NodeSpeeds({"slow": node("slow", None), "fast": node("fast", "4")}.get).speed
    # the probe's scale is twice the labels' (the fast node's label says 4, its agent 8):
    # the slow node's measured 0.5 is 0.25 on the labels' scale
    state.record(Heartbeat.model_validate(heartbeat(
        "slow", [job("a", "PC", work_s=100.0, work_done_s=10.0)], cpu_speed=0.5)))
    state.record(Heartbeat.model_validate(heartbeat("fast", [job("b", "PC", work_s=150.0)],
                                                    cpu_speed=8.0)))
    state.record(Heartbeat.model_validate(heartbeat("old-agent", [])))
    assert [state.known_speed(n) for n in ("slow", "fast", "old-agent", "unknown")] == [
        0.25, 4.0, None, None]
    loads = {n.name: n for n in state.node_loads(["slow", "fast", "old-agent"])}
    assert [loads[n].speed for n in ("slow", "fast", "old-agent")] == [0.25, 4.0, 1.0]
    assert [(j.work, j.attained) for j in loads["slow"].jobs] == [(25.0, 2.5)]
    assert state.priorities(["slow", "fast"], 10)[1] == 10  # as with both labelled
    # the status page says where each speed came from
    assert [status_speed(state, n) for n in ("slow", "fast", "old-agent")] == [
        "0.25 (measured)", "4 (label)", "– (1 taken)"]


@pytest.mark.parametrize("bad", [0.0, 0.01, MAX_SPEED * 2, float("nan"), float("inf"), "fast"])
def test_a_measured_speed_outside_the_labels_bounds_refuses_the_heartbeat(bad: Any) -> None:
    with pytest.raises(ValidationError, match="cpu_speed"):
        Heartbeat.model_validate(heartbeat("n", [], cpu_speed=bad))


@pytest.mark.parametrize(("nodes", "scale"), [
    ([(None, 4.0), (None, 5.0)], 1.0),  # nobody labels: the probe's scale
    ([(0.5, 2.5), (1.0, 5.0), (None, 4.0)], 0.2),  # labels relative to the probe's 5
    ([(0.5, 2.5), (2.0, 5.0), (1.0, 4.0)], 0.25),  # the median of label / measured
    ([(1.0, None), (None, 4.0)], None),  # labelled by agents that do not measure: unusable
    ([], 1.0),
])
def test_measured_speeds_are_put_on_the_labels_scale(
        nodes: list[tuple[float | None, float | None]], scale: float | None) -> None:
    assert measured_scale(nodes) == (None if scale is None else pytest.approx(scale))


def test_an_unlabelled_pool_beside_a_labelled_one_is_taken_on_the_labels_scale() -> None:
    """The administrator labels the old pool 0.5 and leaves the reference pool unlabelled; the
    agents measured 2.5 and 5.0: the unlabelled pool is 1.0 on the labels' scale (not 5.0)."""
    clock = Clock()
    state = ClusterState(stale_after_s=30, placement=lookup("progress").placement, clock=clock)
    state.node_speed = NodeSpeeds({"old": node("old", "0.5")}.get).speed
    state.record(Heartbeat.model_validate(heartbeat("old", [], cpu_speed=2.5)))
    state.record(Heartbeat.model_validate(heartbeat("ref", [], cpu_speed=5.0)))
    assert (state.known_speed("old"), state.known_speed("ref")) == (0.5, 1.0)
    # a newly labelled node counts once the scale is taken again (SCALE_EVERY_S)
    state.record(Heartbeat.model_validate(heartbeat("new", [], cpu_speed=5.0)))
    labels = {"old": node("old", "0.5"), "new": node("new", "2")}
    state.node_speed = NodeSpeeds(labels.get).speed
    assert state.known_speed("ref") == 1.0
    clock.now += SCALE_EVERY_S
    assert state.known_speed("ref") == pytest.approx(1.5)  # 5 x the median of 0.2 and 0.4
