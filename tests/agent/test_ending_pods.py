"""A pod being deleted (``deletionTimestamp``) is followed to its end, its limit put back and its
last checkpoint verified, but reported as ``ending``: it will not run to completion, so the
manager's `specon whatif` leaves it out (tests/manager/test_whatif_input.py). Discovery says so
at arrival (pod_targets), and on the watch (Ending, tests/agent/test_kube_discovery.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loopdoubles import Actuator, Meter

from specon_agent.agent import Agent
from specon_agent.discovery import Arrived, Ending, Resync, Target, pod_targets
from specon_agent.loop_config import LoopConfig


def pod(deleting: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": "u",
                            "labels": {"specon.io/training": "true"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    return {"metadata": meta, "status": {"phase": "Running", "containerStatuses": [
        {"name": "main", "containerID": "containerd://" + "c" * 64, "restartCount": 0,
         "state": {"running": {}}}]}}


def test_discovery_says_a_pod_being_deleted_is_ending(tmp_path: Path) -> None:
    [live] = pod_targets(pod(False), "specon.io/training", tmp_path, None)
    [going] = pod_targets(pod(True), "specon.io/training", tmp_path, None)
    assert (live.ending, going.ending) == (False, True)


def test_the_heartbeat_reports_a_job_whose_pod_is_being_deleted_as_ending() -> None:
    agent = Agent(LoopConfig(node="n"), Actuator(node_cpus=2), Meter())  # type: ignore[arg-type]
    a, b, c = (Target(cid=x * 64, namespace="ns", pod=x) for x in "abc")
    for t in (a, b):
        agent.handle(Arrived(t), 0.0)
    agent.handle(Ending(b.cid), 1.0)
    agent.handle(Ending("f" * 64), 1.0)  # not followed: nothing to say
    # a resync (the watch resumed) names a job's pod as ending, and one that arrives so
    agent.handle(Resync((Target(cid=a.cid, namespace="ns", pod="a", ending=True), b,
                         Target(cid=c.cid, namespace="ns", pod="c", ending=True))), 2.0)
    ending = {r.pod: r.ending for r in agent.heartbeat(3.0).jobs}
    assert ending == {"a": True, "b": True, "c": True}
    agent.handle(Arrived(Target(cid="d" * 64, namespace="ns", pod="d")), 4.0)
    assert {r.pod: r.ending for r in agent.heartbeat(5.0).jobs}["d"] is False


def test_the_heartbeat_reports_each_jobs_kind() -> None:
    agent = Agent(LoopConfig(node="n"), Actuator(node_cpus=2), Meter())  # type: ignore[arg-type]
    agent.handle(Arrived(Target(cid="a" * 64, namespace="ns", pod="a", kind="img:1")), 0.0)
    agent.handle(Arrived(Target(cid="b" * 64, namespace="ns", pod="b")), 0.0)
    assert {r.pod: r.kind for r in agent.heartbeat(1.0).jobs} == {"a": "img:1", "b": None}
