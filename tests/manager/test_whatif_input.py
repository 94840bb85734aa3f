"""The manager's memory of each job's recent losses (specon_manager.whatif_input.LossHistory):
one point per heartbeat whose step moved on, bounded per job and in jobs, a new pod of the same
name (new UID) or a step that went back (a restore) starts again."""

from __future__ import annotations

from typing import Any

from managerlib import heartbeat, job

from specon.wire import Heartbeat
from specon_manager.whatif_input import LossHistory


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
