"""The manager's memory of each job's recent losses (specon_manager.whatif_input.LossHistory):
one point per heartbeat whose step moved on, bounded per job and in jobs, a new pod of the same
name (new UID) or a step that went back (a restore) starts again; and the reply's one entry per
job when two nodes' heartbeats report it (a move in flight)."""

from __future__ import annotations

from typing import Any

from managerlib import Clock, heartbeat, job

from specon.wire import Heartbeat
from specon_manager.state import ClusterState, Reservation
from specon_manager.whatif_input import LossHistory, whatif_input


def hb(*jobs: dict[str, Any]) -> Heartbeat:
    return Heartbeat.model_validate(heartbeat("node-1", list(jobs)))


def test_one_point_per_step_moved_on_at_most_the_last_few() -> None:
    h = LossHistory(points=4, jobs=10)
    for step in (10, 20, 20, 30, 40, 50, 60):  # 20 twice: the node's step did not move
        h.add(hb(job("a", "PC", uid="u1", step=step, loss=1.0 / step),
                 job("b", "PC", uid="u2")))  # no step, no loss: nothing kept
    assert h.points("default", "a", "u1") == [(30, 1 / 30), (40, 1 / 40), (50, 1 / 50),
                                              (60, 1 / 60)]
    assert h.points("default", "b", "u2") == []
    assert h.points("default", "a", "another-uid") == []
    h.add(hb(job("a", "PC", uid="u1", step=45, loss=0.5)))  # restored from a checkpoint
    assert h.points("default", "a", "u1") == [(45, 0.5)]
    h.add(hb(job("a", "PC", uid="u9", step=50, loss=0.4)))  # a new pod of that name
    assert h.points("default", "a", "u9") == [(50, 0.4)]
    assert h.points("default", "a", "u1") == []


def test_the_jobs_reported_least_recently_are_forgotten_beyond_the_bound() -> None:
    h = LossHistory(points=4, jobs=3)
    for i in range(5):
        h.add(hb(job(f"j{i}", "PC", uid=f"u{i}", step=1, loss=1.0)))
    h.add(hb(job("j2", "PC", uid="u2", step=2, loss=0.9)))  # j2 reported again: kept
    h.add(hb(job("j5", "PC", uid="u5", step=1, loss=1.0)))
    kept = [i for i in range(6) if h.points("default", f"j{i}", f"u{i}")]
    assert kept == [2, 4, 5]


def test_a_job_two_nodes_report_during_a_move_comes_out_once_as_the_newer_report() -> None:
    clock = Clock()
    state = ClusterState(stale_after_s=30, clock=clock)
    t = clock.now

    def report(node: str, at: float, uid: str, step: int) -> None:
        hb = heartbeat(node, [job("train", "PC", namespace="ml", uid=uid, step=step,
                                  work_done_s=float(step))], time=at)
        assert state.record(Heartbeat.model_validate(hb))

    report("node-2", t - 20, "old-uid", 100)  # the source's last heartbeat, before the move
    report("node-1", t - 5, "new-uid", 90)    # the target's, the replacement restored
    got = whatif_input(state, None, now=t)["jobs"]
    assert [(j["pod"], j["node"], j["uid"], j["step"], j["reported"]) for j in got] == [
        ("train", "node-1", "new-uid", 90, t - 5)]
    # The same instant on both nodes: the fresh node's report, then the node first by name.
    report("node-1", t, "uid", 120)
    clock.now += 40  # node-1 goes stale
    report("node-2", t, "uid", 110)
    assert [j["node"] for j in whatif_input(state, None)["jobs"]] == ["node-2"]
    report("node-1", t, "uid", 120)  # both fresh
    assert [j["node"] for j in whatif_input(state, None)["jobs"]] == ["node-1"]


def test_a_job_whose_pod_is_being_deleted_is_left_out_unless_it_is_being_moved() -> None:
    """An agent follows a pod being deleted to its end and reports it as ``ending``: it will
    not run to completion, so whatif leaves it out (the observe test on real nodes counted an
    earlier test's ending pod as a fifth job); a moved job's evicted source stays, its
    replacement not yet reporting."""
    clock = Clock()
    state = ClusterState(stale_after_s=30, clock=clock)
    state.record(Heartbeat.model_validate(heartbeat("node-1", [
        job("kept", "PC", namespace="ml", uid="u1"),
        job("deleted", "PC", namespace="ml", uid="u2", ending=True),
        job("moving", "PC", namespace="ml", uid="u3", ending=True)], time=clock.now)))
    state.reserve(Reservation("migration/m1", "m1", "node-2", "node-1", pod="ml/moving"))
    assert [j["pod"] for j in whatif_input(state, None)["jobs"]] == ["kept", "moving"]
    state.release("migration/m1")
    assert [j["pod"] for j in whatif_input(state, None)["jobs"]] == ["kept"]


def test_each_node_carries_its_labelled_speed_or_none() -> None:
    state = ClusterState(stale_after_s=30)
    state.node_speed = {"node-1": 2.5}.get
    for node in ("node-1", "node-2"):
        assert state.record(Heartbeat.model_validate(heartbeat(node, [])))
    got = {n["name"]: n["speed"] for n in whatif_input(state, None)["nodes"]}
    assert got == {"node-1": 2.5, "node-2": None}
