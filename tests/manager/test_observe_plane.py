"""Observe mode on the real control plane (issue 30, "try before you enforce"): the manager
plans the moves it would make, through the same rules, and makes none: no record, no
reservation, no checkpoint request, no eviction; each would-be move is one WouldMigrate Event
on its pod and specon_manager_would_migrations_total. The fixtures and stand-ins are those of
test_manager_plane.py (the same scenarios, enforcing, move the job)."""

# The fixtures imported from test_manager_plane.py are redefined as parameters (F811).
# ruff: noqa: F811

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from planelib import Plane
from planemanager import Api, JobStandIn, ManagerProcess, wait_for
from test_manager_plane import (  # noqa: F401  (fixtures)
    agents_for,
    api,
    converged_bare_job,
    drive,
    ext_port,
    manager,
    mnodes,
    scheduler,
    set_layout,
    start_job,
    tag,
    tokens,
    train_pod,
    two_converged_on_the_first_node,
)

from specon.names import ANNOTATION_STATE

pytestmark = pytest.mark.plane

MOVING = {"MigrationStarted", "CheckpointRequested", "CheckpointVerified", "MigrationEvicted",
          "MigrationCompleted", "MigrationNotNeeded"}


def metric_lines(manager: ManagerProcess, prefix: str) -> list[str]:
    return [ln for ln in httpx.get(f"{manager.url}/metrics").text.splitlines()
            if ln.startswith(prefix)]


def for_a_while(seconds: float) -> Any:
    """A ``done`` for drive(): the kubelet, agents and steps go on for ``seconds``."""
    end = time.monotonic() + seconds
    return lambda _pods: time.monotonic() > end


def unmoved(api: Api, ns: str, job: JobStandIn, node: str) -> None:
    """The job runs in its first pod, on its node, unmarked, and was never asked to save."""
    pod = api.pod(ns, job.pod)
    assert pod is not None and pod["spec"]["nodeName"] == node
    assert not pod["metadata"].get("deletionTimestamp")
    # no mark of a move (the pod's specon.io/state, what SpeCon sees of it, is told as always)
    assert not [k for k in pod["metadata"].get("annotations", {})
                if k.startswith("specon.io/") and k != ANNOTATION_STATE]
    told = pod["metadata"].get("annotations", {}).get(ANNOTATION_STATE)
    if told is not None:  # the limit in it is one the agent would set, and says so
        assert "wouldLimitCores" in json.loads(told) and "limitCores" not in json.loads(told)
    assert job.starts == 1 and job.running
    assert not [e for e in job.events() if e["event"] == "checkpoint"]


def would_migrate(api: Api, ns: str) -> list[dict[str, Any]]:
    return [e for e in api.event_items(ns) if e.get("reason") == "WouldMigrate"]


def test_a_converged_job_s_move_is_told_and_not_made(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path,
) -> None:
    ns = plane_namespace
    manager.start(enforcement="observe")
    agents, job, reply = converged_bare_job(plane, api, mnodes, tokens, ns, manager, tmp_path,
                                            train_pod("train-a", tag, node=mnodes[3]))
    # enforcing, this request moves the job to node 1 (test_manager_plane.py)
    assert reply["decision"] == "stay" and reply["migrated"] is True, reply
    assert reply["reason"] == f"observe mode: would migrate to {mnodes[1]}; not moved"
    # the manager's own mark (``observed``, which rebalancing counts by) is not on the wire
    assert set(reply) == {"decision", "target", "reason", "migrated"}, reply
    drive(api, ns, agents, [job], for_a_while(3))
    unmoved(api, ns, job, mnodes[3])
    [event] = wait_for("the WouldMigrate Event", lambda: would_migrate(api, ns))
    assert event["regarding"]["name"] == "train-a"
    assert event["note"] == (f"observe mode: would migrate train-a (converged) from {mnodes[3]} "
                             f"to {mnodes[1]}; not moved")
    assert not MOVING & set(api.events(ns))
    assert metric_lines(manager, "specon_manager_would_migrations_total{") == [
        'specon_manager_would_migrations_total{reason="converged"} 1.0']
    assert metric_lines(manager, "specon_manager_migrations_started_total{") == []


def test_a_rebalancing_move_is_told_once_and_not_made(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path,
) -> None:
    ns = plane_namespace
    manager.start(rebalance=True, rebalance_period_s=0.5, enforcement="observe")
    # as test_rebalancing_moves_a_converged_job_onto_the_idle_node: enforcing, one job moves
    agents, jobs = two_converged_on_the_first_node(plane, api, mnodes, tokens, ns, tag,
                                                   manager, tmp_path)

    def observed(_pods: Any) -> bool:
        return bool(metric_lines(manager, 'specon_manager_rebalance_moves_total{outcome="obs'))

    drive(api, ns, agents, jobs, observed)
    drive(api, ns, agents, jobs, for_a_while(3))  # more rounds: the same plan, told once
    for j in jobs:
        unmoved(api, ns, j, mnodes[0])
    [event] = would_migrate(api, ns)
    assert event["regarding"]["name"] in ("ra", "rb")
    assert event["note"].endswith(f"(rebalance) from {mnodes[0]} to {mnodes[3]}; not moved")
    assert not MOVING & set(api.events(ns))
    assert metric_lines(manager, "specon_manager_would_migrations_total{") == [
        'specon_manager_would_migrations_total{reason="rebalance"} 1.0']
    # counted by the reply's mark (``observed``), round after round: planned again, not told
    rounds = metric_lines(manager, 'specon_manager_rebalance_moves_total{outcome="observed"}')
    assert rounds and float(rounds[0].split()[-1]) >= 2
