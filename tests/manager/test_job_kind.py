"""A new pod as the typical job of its kind (specon.kinds, specon.core.job_loads.new_job_load):
the extender reads the pod's ``specon.io/kind`` label, else its first container's image; each
agent reports its jobs' kinds; where every compared node is labelled with its speed and jobs
of that kind run somewhere, the pod is placed as their typical job (median work left and
cores used), else as the typical job of the least loaded nodes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from managerlib import heartbeat, job

from specon.core.policy import lookup
from specon.core.progress import KIND_NODES
from specon.names import LABEL_CPU_SPEED, LABEL_KIND, LABEL_MIGRATABLE
from specon.wire import Heartbeat
from specon_manager.extender import prioritize_nodes
from specon_manager.node_speed import NodeSpeeds
from specon_manager.state import ClusterState

SPEEDS = {"fast": 2.0, "big": 0.5, "busy": 0.5}


def state_of(labelled: bool) -> ClusterState:
    """Two empty nodes, a small fast one and a big slow one, and a busy big slow one running
    three one-core jobs of kind ``small`` and one of kind ``wide`` that keeps 16 cores busy."""
    state = ClusterState(stale_after_s=30, placement=lookup("progress").placement)
    if labelled:
        state.node_speed = NodeSpeeds({n: {"metadata": {"name": n, "labels": {
            LABEL_CPU_SPEED: str(s)}}} for n, s in SPEEDS.items()}.get).speed
    busy = [job(f"s{i}", "PC", work_s=600.0, demand_cores=1.0, kind="small") for i in range(3)]
    busy.append(job("w", "PC", work_s=9600.0, demand_cores=16.0, kind="wide"))
    for name, cpus, jobs in (("fast", 2.0, []), ("big", 32.0, []), ("busy", 32.0, busy)):
        state.record(Heartbeat.model_validate(heartbeat(name, jobs, cpus=cpus)))
    return state


def best(state: ClusterState, kind: str | None) -> str:
    names = ["fast", "big", "busy"]
    scores = state.priorities(names, 10, kind)
    return names[scores.index(max(scores))]


def test_a_pod_is_placed_as_the_typical_job_of_its_kind_where_nodes_are_labelled() -> None:
    state = state_of(labelled=True)
    # the typical job of the nodes uses one core: the fastest core wins
    assert best(state, None) == "fast"
    assert best(state, "default/small") == "fast"
    assert best(state, "default/never-seen") == "fast"  # no job of its kind: as before
    # a pod of the kind that keeps 16 cores busy: 16 slow cores beat 2 fast ones
    assert best(state, "default/wide") == "big"
    # a kind is a namespace's own: another tenant's pods of that name are not steered by it
    assert best(state, "other/wide") == "fast"


def test_without_speed_labels_the_kind_is_not_used() -> None:
    state = state_of(labelled=False)
    assert best(state, "default/wide") == best(state, "default/small") == best(state, None)


def test_the_kind_index_follows_heartbeats_and_forgotten_nodes() -> None:
    state = state_of(labelled=True)
    assert state._kinds == {"default/small": {"busy"}, "default/wide": {"busy"}}
    # the wide job ended: the next heartbeat no longer reports it
    state.record(Heartbeat.model_validate(heartbeat("busy", [
        job("s0", "PC", work_s=600.0, demand_cores=1.0, kind="small")], seq=2, cpus=32.0)))
    assert state._kinds == {"default/small": {"busy"}}
    assert best(state, "default/wide") == "fast"
    state.forget_node("busy")
    assert state._kinds == {}


def test_at_most_kind_nodes_are_read_for_a_kind() -> None:
    state = ClusterState(stale_after_s=30, placement=lookup("progress").placement)
    for i in range(KIND_NODES + 10):
        state.record(Heartbeat.model_validate(heartbeat(f"n{i}", [
            job(f"p{i}", "PC", work_s=100.0, kind="sweep")])))
    jobs = state._kind_jobs("default/sweep", state.clock())
    assert len(jobs) == KIND_NODES and {j.work for j in jobs} == {100.0}


def pod(labels: dict[str, str] | None, image: Any, namespace: str = "default",
        movable: bool = True) -> dict[str, Any]:
    """A new training pod, by default one that can be moved (``specon.io/migratable``)."""
    mine = {"specon.io/training": "true", **({LABEL_MIGRATABLE: "true"} if movable else {})}
    return {"metadata": {"name": "new", "namespace": namespace,
                         "labels": {**mine, **(labels or {})}},
            "spec": {"schedulerName": "specon", "containers": [{"name": "main",
                                                                 "image": image}]}}


@pytest.mark.parametrize(("labels", "image", "winner"), [
    ({LABEL_KIND: "wide"}, "trainer:1", "big"),  # the label names the kind
    (None, "wide", "big"),  # no label: the first container's image
    ({LABEL_KIND: "small"}, "wide", "fast"),  # the label wins over the image
    ({LABEL_KIND: "bad kind!"}, "wide", "big"),  # an invalid label: the image
    (None, None, "fast"),  # neither: the typical job of the nodes
])
def test_the_extender_reads_the_pods_kind(labels: dict[str, str] | None, image: Any,
                                          winner: str) -> None:
    state = state_of(labelled=True)
    args = {"Pod": pod(labels, image), "NodeNames": ["fast", "big", "busy"]}
    got = json.loads(prioritize_nodes(state, args, "specon"))
    top = max(got, key=lambda h: h["Score"])
    assert top["Host"] == winner, got


def test_a_pod_of_another_namespace_is_not_placed_by_this_ones_kind() -> None:
    state = state_of(labelled=True)
    args = {"Pod": pod({LABEL_KIND: "wide"}, "trainer:1", "other"),
            "NodeNames": ["fast", "big", "busy"]}
    got = json.loads(prioritize_nodes(state, args, "specon"))
    assert max(got, key=lambda h: h["Score"])["Host"] == "fast", got


@pytest.mark.parametrize(("labels", "winner"), [
    ({LABEL_MIGRATABLE: "true"}, "big"),  # it can be moved off a bad guess later
    (None, "fast"),  # it cannot: kept off the node 4x slower per core
    ({LABEL_MIGRATABLE: "false"}, "fast"),
])
def test_a_pod_that_cannot_be_moved_is_kept_off_cores_slow_for_one_thread(
        labels: dict[str, str] | None, winner: str) -> None:
    """Its kind keeps 16 cores busy, so 16 slow cores look better than 2 fast ones; but busy
    cores are not a speed-up (a job may spin threads it gains nothing from), and a pod that
    cannot be moved would be stuck on the slow node were it effectively one thread
    (specon.core.placement.SERIAL_TIME_BOUND)."""
    state = state_of(labelled=True)
    args = {"Pod": pod({LABEL_KIND: "wide", **(labels or {})}, "trainer:1", movable=False),
            "NodeNames": ["fast", "big", "busy"]}
    got = json.loads(prioritize_nodes(state, args, "specon"))
    assert max(got, key=lambda h: h["Score"])["Host"] == winner, got
