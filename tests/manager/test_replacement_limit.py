"""A bare pod's replacement gets the CPU limit its owner set, not the one the source's agent
wrote into the source's spec (resize actuator), even when that agent's report of the job is
gone by the time the copy is made: the limit is recorded when the move starts (the fault
campaign of 2026-11-27 found a moved job keeping the agent's 4 cores for good)."""

from __future__ import annotations

import json

import pytest
from managerlib import Clock, heartbeat, job
from test_move_cost_manager import NS, FakeKube, bare, crowded

from specon.quantity import parse_cpu
from specon.wire import Heartbeat
from specon_manager.migration import Migration

AGENTS = "4"  # what the source's agent set
OWNERS = 2.0  # what the owner set


def limited(name: str, cpu: str) -> dict:
    pod = bare(name, "node-1")
    pod["spec"]["containers"] = [{"name": "main", "resources": {
        "limits": {"cpu": cpu}, "requests": {"cpu": "1"}}}]
    return pod


def move_b(reported_owner: float | None, report_gone: bool) -> tuple[FakeKube, Migration]:
    """Move ``b`` (bare, its spec at the agent's limit) to node-2; with ``report_gone`` the
    source's next heartbeat, after the checkpoint is verified, no longer names the job."""
    clock = Clock()
    kube = FakeKube({f"{NS}/{n}": limited(n, AGENTS) for n in ("a", "b", "c")})
    planner, ctl, state, _ = crowded(kube, 30.0, clock)
    extra = {} if reported_owner is None else {"owner_limit_cores": reported_owner}

    def beat(seq: int, checkpoint: dict | None = None, without_b: bool = False) -> None:
        state.record(Heartbeat.model_validate(heartbeat("node-1", [
            job(n, "PC", uid=f"u-{n}", work_s=w, checkpointable=True, container="main",
                **extra, **({"checkpoint": checkpoint} if checkpoint and n == "b" else {}))
            for n, w in (("a", 600.0), ("b", 900.0), ("c", 1200.0))
            if not (without_b and n == "b")], cpus=1, seq=seq)))

    beat(2)
    (mv,) = planner.run_once()
    assert mv.job == "default/b"
    (m,) = ctl.in_flight()
    if report_gone:
        ctl.after_phase = lambda phase: beat(4, without_b=True) if phase == "evicting" else None
    clock.now += 20
    beat(3, {"request": m.id, "name": "ck-1", "step": 10, "sha256": "0" * 64, "time": 1.0})
    ctl.reconcile()
    return kube, m


@pytest.mark.parametrize("report_gone", [False, True])
def test_the_replacement_gets_the_owners_limit_when_the_report_is_gone(
        report_gone: bool) -> None:
    kube, m = move_b(OWNERS, report_gone)
    assert (m.owner_cpu_container, m.owner_cpu_limit) == ("main", OWNERS)
    (copy,) = [o for p, o in kube.objs.items() if p.startswith(f"{NS}/b-")]
    res = copy["spec"]["containers"][0]["resources"]
    assert (parse_cpu(res["limits"]["cpu"]), res["requests"]["cpu"]) == (OWNERS, "1")
    record = json.loads(copy["metadata"]["annotations"]["specon.io/migration"])
    assert record["owner_cpu_limit"] == OWNERS


def test_a_limit_the_agent_never_changed_is_recorded_from_the_spec() -> None:
    # The report says unchanged (no owner_limit_cores): the spec's limit is the owner's.
    kube, m = move_b(None, report_gone=True)
    assert (m.owner_cpu_container, m.owner_cpu_limit) == ("main", float(AGENTS))
    (copy,) = [o for p, o in kube.objs.items() if p.startswith(f"{NS}/b-")]
    assert parse_cpu(copy["spec"]["containers"][0]["resources"]["limits"]["cpu"]) == 4.0


@pytest.mark.parametrize("value", [0, -1, 1e9, "2", True, None, float("nan")])
def test_a_record_with_a_bad_owner_limit_is_read_without_it(value: object) -> None:
    m = Migration(id="m1", namespace="default", pod="a", pod_uid="u-a", source="node-1",
                  target="node-2", kind="pod", owner="", owner_uid="", reason="progress",
                  phase="placing", started=1.0, deadline=2.0, owner_cpu_container="main",
                  owner_cpu_limit=OWNERS)
    data = json.loads(m.record())
    data["owner_cpu_limit"] = value
    data["owner_cpu_container"] = ["main"] if value is None else "main"
    back = Migration.from_record(json.dumps(data))
    assert back is not None and back.owner_cpu_limit is None
    assert back.owner_cpu_container == ("" if value is None else "main")
