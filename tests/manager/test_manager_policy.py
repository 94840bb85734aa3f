"""The manager runs the policy it is given by name (specon.core.policy): under the
progress-aware one the extender places a pod where it adds the least predicted completion,
and a planned move (specon.core.move_plan.plan_moves, the simulator's rule) takes a job off a
crowded node through the migration controller; agents' requests are answered without a move;
a policy whose rules the manager lacks is refused at start."""

from __future__ import annotations

from typing import Any

import pytest
from managerlib import heartbeat, job
from pydantic import ValidationError

from specon.core.policy import POLICIES, Policy, lookup, register
from specon.wire import Heartbeat, ReallocationRequest
from specon_manager.metrics import ManagerMetrics
from specon_manager.migration import MigrationController
from specon_manager.planner import MovePlanner
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState


class FakeKube:
    """Just enough of the API for the controller and the planner (no cluster here)."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = {f"/api/v1/namespaces/default/pods/{p['metadata']['name']}": p
                     for p in pods}
        self.events: list[str] = []

    def get(self, path: str) -> dict[str, Any] | None:
        return self.pods.get(path)

    def list(self, path: str, **params: str) -> list[dict[str, Any]]:
        return list(self.pods.values()) if path == "/api/v1/pods" else []

    def patch(self, path: str, body: Any, kind: str = "merge") -> dict[str, Any]:
        return {}

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/events"):
            self.events.append(body["reason"])
        return {}


def running(name: str, node: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"u-{name}",
                         "labels": {"specon.io/migratable": "true"}},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def state_of(policy: str, beats: list[dict[str, Any]]) -> ClusterState:
    s = ManagerSettings(kubernetes=False, policy=policy)
    state = ClusterState(stale_after_s=30, placement=lookup(s.policy).placement)
    for b in beats:
        state.record(Heartbeat.model_validate(b))
    return state


def test_progress_placement_prefers_the_node_with_the_least_work_ahead() -> None:
    beats = [heartbeat("busy", [job("a", "PC", work_s=3000.0), job("b", "PC", work_s=3000.0)]),
             heartbeat("light", [job("c", "CC", work_s=100.0)]),
             heartbeat("gone", [])]
    state = state_of("progress", beats)
    scores = state.priorities(["busy", "light", "unknown"], 10)
    assert scores[1] == 10 and 0 < scores[0] < 10 and scores[2] == 0, scores
    # the research's score counts jobs by category: the same light node, for another reason
    research = state_of("paper", beats).priorities(["busy", "light"], 10)
    assert research[1] == 10
    neutral = state_of("default", beats).priorities(["busy", "light", "unknown"], 10)
    assert neutral == [10, 10, 0]


def test_a_job_that_declares_no_total_is_placed_around_as_a_typical_declared_one() -> None:
    """Issue 28: a job whose heartbeat has no ``total_steps`` reports a guess (as much again as
    it has done); the manager's node loads mark it, so placement counts it at least as the
    mean declared job (specon.core.progress.guesses_floored) and a node of young undeclared
    jobs no longer looks empty."""
    young = [job(f"y{i}", "PC", work_s=5.0) for i in range(8)]
    beats = [heartbeat("young", young),
             heartbeat("steady", [job(p, "PC", work_s=w, total_steps=100)
                                  for p, w in (("a", 300.0), ("b", 900.0), ("c", 300.0),
                                               ("d", 900.0))])]
    state = state_of("progress", beats)
    loads = {n.name: n for n in state.node_loads(["young", "steady"])}
    assert all(j.guessed for j in loads["young"].jobs)
    assert not any(j.guessed for j in loads["steady"].jobs)
    assert state.priorities(["young", "steady"], 10)[1] == 10


def test_a_planned_move_takes_a_job_off_a_crowded_node() -> None:
    pods = [running(n, "node-1") for n in ("a", "b", "c")]
    kube = FakeKube(pods)
    settings = ManagerSettings(kubernetes=False, policy="progress", migration_cost_s=30)
    state = state_of("progress", [
        heartbeat("node-1", [job(n, "PC", uid=f"u-{n}", work_s=w, checkpointable=True)
                             for n, w in (("a", 600.0), ("b", 900.0), ("c", 1200.0))], cpus=1),
        heartbeat("node-2", [], cpus=1)])
    ctl = MigrationController(kube, state, settings, ManagerMetrics())  # type: ignore[arg-type]
    planner = MovePlanner(kube, state, ctl, settings, ManagerMetrics())  # type: ignore[arg-type]
    started = planner.run_once()
    assert len(started) == 1 and (started[0].source, started[0].target) == ("node-1", "node-2")
    assert [(m.reason, m.target) for m in ctl.in_flight()] == [("progress", "node-2")]
    # the job on its way counts on its target, as in the simulator (placement sees it there)
    moved = f"default/{started[0].job.split('/')[1]}"
    assert [j.name for j in state.node_loads(["node-2"])[0].jobs] == [moved]
    assert planner.run_once() == []  # one move at a time
    # under this policy an agent's request moves nothing, and its agent stops asking
    reply = ctl.reallocate("node-1", ReallocationRequest(node="node-1", namespace="default",
                                                         pod="a", time=1.0))
    assert (reply.decision, reply.migrated) == ("stay", True) and "plan" in reply.reason


def test_a_policy_the_manager_cannot_run_is_refused_by_name() -> None:
    with pytest.raises(ValidationError, match="unknown policy 'nope'"):
        ManagerSettings(kubernetes=False, policy="nope")
    register(Policy("toy-coin", placement="coin"))
    try:
        with pytest.raises(ValidationError, match="cannot run its placement rule 'coin'"):
            ManagerSettings(kubernetes=False, policy="toy-coin")
    finally:
        POLICIES.pop("toy-coin")
    assert ManagerSettings(kubernetes=False, policy="progress").policy == "progress"
    assert ManagerSettings(kubernetes=False).policy == "progress"


@pytest.mark.parametrize(("old", "new"), [("specon+flowcon", "progress"),
                                          ("specon", "progress-equal-share")])
def test_an_old_policy_name_is_read_as_its_new_one_with_a_warning(
        old: str, new: str, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 26: the renamed policies' old names are accepted for one release."""
    with pytest.warns(DeprecationWarning, match=f"now called '{new}'"):
        settings = ManagerSettings(kubernetes=False, policy=old)
    assert settings.policy == new and lookup(settings.policy) is POLICIES[new]
    assert any(f"'{old}' is now called '{new}'" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValidationError, match=r"unknown policy 'nope' \(known: default, "):
        ManagerSettings(kubernetes=False, policy="nope")
