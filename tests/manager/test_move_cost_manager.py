"""Per-job move cost (issue 26): the planner charges a job its own measured move cost
(``specon.io/move-cost-s``, specon.core.move_cost) or ``migration_cost_s`` until it has one; a
completed move's cost (checkpoint request to the replacement running) is measured, written on
the Job as its running mean, counted in ``specon_manager_move_cost_seconds`` and set against the
move's prediction (``specon_manager_move_gain_seconds``, events MigrationStarted, MigrationCompleted
and MigrationCostMeasured). The whole migration on a real API server is the plane tests'."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from managerlib import Clock, heartbeat, job

from specon.core.policy import lookup
from specon.wire import Heartbeat
from specon_manager.kube import KubeError
from specon_manager.metrics import ManagerMetrics
from specon_manager.migration import A_MOVE_COST, Migration, MigrationController
from specon_manager.migration.end import finish
from specon_manager.planner import MovePlanner
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState

POLICY = "progress"
NS = "/api/v1/namespaces/default/pods"
JOBS = "/apis/batch/v1/namespaces/default/jobs"


class FakeKube:
    """An object store with just the API the controller and the planner use: get, list,
    merge patches of labels and annotations (uid precondition), create, and an eviction that
    removes the pod."""

    def __init__(self, objs: dict[str, dict[str, Any]]) -> None:
        self.objs = objs
        self.events: list[tuple[str, str]] = []

    def get(self, path: str) -> dict[str, Any] | None:
        obj = self.objs.get(path)
        if obj is None and path.startswith("/api/v1/nodes/"):
            # Every node is there, Ready and schedulable: the controller looks at the target
            # again before it evicts (issue 32).
            return {"metadata": {"name": path.rsplit("/", 1)[1], "labels": {}}, "spec": {},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
        return copy.deepcopy(obj) if obj is not None else None

    def list(self, path: str, **params: str) -> list[dict[str, Any]]:
        kind = {"/api/v1/pods": "/pods/", "/apis/batch/v1/jobs": "/jobs/"}.get(path)
        return [copy.deepcopy(o) for p, o in self.objs.items()
                if (kind in p if kind else p.startswith(path + "/"))]

    def patch(self, path: str, body: Any, kind: str = "merge") -> dict[str, Any]:
        obj = self.objs.get(path)
        if obj is None:
            raise KubeError(404, "NotFound", path)
        md = body.get("metadata") or {}
        if "uid" in md and md["uid"] != obj["metadata"].get("uid"):
            raise KubeError(409, "Conflict", path)
        for field in ("labels", "annotations"):
            have = obj["metadata"].setdefault(field, {})
            for k, v in (md.get(field) or {}).items():
                if v is None:
                    have.pop(k, None)
                else:
                    have[k] = v
        return copy.deepcopy(obj)

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/events"):
            self.events.append((body["reason"], body["note"]))
        elif path.endswith("/eviction"):
            self.objs.pop(path.removesuffix("/eviction"), None)
        else:
            self.objs[f"{path}/{body['metadata']['name']}"] = copy.deepcopy(body)
        return body

    def delete(self, path: str, body: Any = None) -> None:
        self.objs.pop(path, None)

    def messages(self, reason: str) -> list[str]:
        return [m for r, m in self.events if r == reason]


def bare(name: str, node: str, **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"u-{name}",
                         "labels": {"specon.io/migratable": "true"},
                         "annotations": annotations},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def owned(name: str, node: str, uid: str = "") -> dict[str, Any]:
    pod = bare(name, node)
    pod["metadata"]["uid"] = uid or f"u-{name}"
    pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": f"j-{name}",
                                           "uid": f"ju-{name}", "controller": True}]
    return pod


def batch_job(name: str, **annotations: str) -> dict[str, Any]:
    return {"kind": "Job", "metadata": {"name": f"j-{name}", "namespace": "default",
                                        "uid": f"ju-{name}", "annotations": annotations},
            "spec": {"podReplacementPolicy": "Failed", "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}}}


def crowded(kube: FakeKube, default_s: float, clock: Clock | None = None) -> (
    tuple[MovePlanner, MigrationController, ClusterState, ManagerMetrics]
):
    """Three jobs on a one-core node beside an idle one: moving ``b`` is predicted to cut the
    sum of completion times by 1500 s before its cost (specon.core.move_plan.plan_moves)."""
    settings = ManagerSettings(kubernetes=False, policy=POLICY, migration_cost_s=default_s)
    state = ClusterState(stale_after_s=30, placement=lookup(POLICY).placement)
    state.record(Heartbeat.model_validate(heartbeat("node-1", [
        job(n, "PC", uid=f"u-{n}", work_s=w, checkpointable=True)
        for n, w in (("a", 600.0), ("b", 900.0), ("c", 1200.0))], cpus=1)))
    state.record(Heartbeat.model_validate(heartbeat("node-2", [], cpus=1)))
    metrics = ManagerMetrics()
    ctl = MigrationController(kube, state, settings, metrics,  # type: ignore[arg-type]
                              **({"clock": clock} if clock else {}))
    return MovePlanner(kube, state, ctl, settings, metrics), ctl, state, metrics  # type: ignore[arg-type]


def bare_pods(**costs: str) -> FakeKube:
    return FakeKube({f"{NS}/{n}": bare(n, "node-1", **(
        {A_MOVE_COST: costs[n]} if n in costs else {})) for n in ("a", "b", "c")})


@pytest.mark.parametrize(("default_s", "costs", "moved"), [
    (2000.0, {}, None),  # the flat default outweighs the gain
    (2000.0, {"a": "100", "b": "100", "c": "100"}, "b"),  # measured cheap: it pays
    (2000.0, {"b": "100"}, "b"),  # only b measured cheap: b goes
    (30.0, {}, "b"),
    (30.0, {"a": "5000", "b": "5000", "c": "5000"}, None),  # measured dear: it does not pay
    # what a tenant may write is no measurement: the default applies
    (2000.0, {"a": "nan", "b": "1e-3", "c": "1" * 5000}, None),
    (30.0, {"a": "-1", "b": "abc", "c": "1e400"}, "b"),
])
def test_the_planner_charges_each_job_its_own_measured_cost(
        default_s: float, costs: dict[str, str], moved: str | None) -> None:
    kube = bare_pods(**costs)
    planner, ctl, _, _ = crowded(kube, default_s)
    started = planner.run_once()
    assert [mv.job for mv in started] == ([f"default/{moved}"] if moved else [])
    if moved:
        (m,) = ctl.in_flight()
        charged = float(costs.get(moved, "x")) if costs.get(moved, "").isdigit() else default_s
        assert (m.charged_cost_s, m.predicted_gain_s) == (charged, 1500.0 - charged)
        (msg,) = kube.messages("MigrationStarted")
        assert f"predicted gain {1500 - charged:.0f} s" in msg
        assert f"charged move cost of {charged:.0f} s" in msg


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_completed_move_is_measured_written_on_its_job_and_set_against_its_prediction(
        ) -> None:
    clock = Clock()
    objs = {f"{NS}/{n}": owned(n, "node-1") for n in ("a", "b", "c")}
    objs.update({f"{JOBS}/j-{n}": batch_job(n) for n in ("a", "c")})
    objs[f"{JOBS}/j-b"] = batch_job("b", **{A_MOVE_COST: "200"})
    kube = FakeKube(objs)
    planner, ctl, state, metrics = crowded(kube, 2000.0, clock)
    (mv,) = planner.run_once()
    assert mv.job == "default/b" and mv.gain_s == 1300.0  # charged its own 200 s
    (m,) = ctl.in_flight()
    assert m.requested == clock.now and m.charged_cost_s == 200.0
    # its checkpoint answers the request 20 s later; it is evicted
    clock.now += 20
    state.record(Heartbeat.model_validate(heartbeat("node-1", [
        job(n, "PC", uid=f"u-{n}", work_s=w, checkpointable=True, **({"checkpoint": {
            "request": m.id, "name": "ck-1", "step": 10, "sha256": "0" * 64, "time": 1.0}}
            if n == "b" else {})) for n, w in (("a", 600.0), ("b", 900.0), ("c", 1200.0))],
        cpus=1, seq=2)))
    ctl.reconcile()
    assert f"{NS}/b" not in kube.objs and ctl.in_flight()[0].phase == "placing"
    # the Job's new pod is bound on the target; its container starts 70 s after the request
    new = owned("b-2", "node-2", uid="u-b-2")
    new["metadata"]["ownerReferences"][0].update(name="j-b", uid="ju-b")
    new["status"] = {"phase": "Pending"}
    kube.objs[f"{NS}/b-2"] = new
    clock.now += 30
    ctl.reconcile()
    assert ctl.in_flight() == []
    (done,) = kube.messages("MigrationCompleted")
    assert "predicted gain 1300 s, charged cost 200 s" in done
    assert kube.messages("MigrationCostMeasured") == []  # not running yet: not measured
    ctl.reconcile()
    assert kube.messages("MigrationCostMeasured") == []
    new["status"] = {"phase": "Running", "containerStatuses": [
        {"name": "main", "state": {"running": {"startedAt": iso(m.requested + 70)}}}]}
    clock.now += 40
    ctl.reconcile()
    (measured,) = kube.messages("MigrationCostMeasured")
    assert "stopped 70 s" in measured and "charged 200 s" in measured
    # realised gain: 1300 + 200 - 70
    assert "predicted gain 1300 s" in measured and "realised gain 1430 s" in measured
    # the running mean of the Job's moves: (200 + 70) / 2
    assert kube.objs[f"{JOBS}/j-b"]["metadata"]["annotations"][A_MOVE_COST] == "135.0"
    reg = metrics.registry
    assert reg.get_sample_value("specon_manager_move_cost_seconds_sum") == 70.0
    for kind, gain in (("predicted", 1300), ("realised", 1430)):
        assert reg.get_sample_value("specon_manager_move_gain_seconds_count", {"kind": kind}) == 1
        assert reg.get_sample_value("specon_manager_move_gain_sum_seconds", {"kind": kind}) == gain
    ctl.reconcile()  # measured once
    assert len(kube.messages("MigrationCostMeasured")) == 1


def test_a_replacement_that_never_runs_gives_no_measurement() -> None:
    clock = Clock()
    kube = bare_pods()
    _, ctl, _, metrics = crowded(kube, 30.0, clock)
    m = Migration(id="m1", namespace="default", pod="a", pod_uid="u-a", source="node-1",
                  target="node-2", kind="pod", owner="", owner_uid="", reason="progress",
                  phase="placing", started=clock.now, deadline=clock.now + 300,
                  replacement="a-m1", requested=clock.now)
    kube.objs[f"{NS}/a-m1"] = bare("a-m1", "node-2")
    kube.objs[f"{NS}/a-m1"]["status"] = {"phase": "Pending"}
    finish(ctl, m, kube.get(f"{NS}/a-m1"), "")
    clock.now += 4000
    ctl.reconcile()
    assert kube.messages("MigrationCostMeasured") == []
    assert metrics.registry.get_sample_value("specon_manager_move_cost_seconds_count") == 0
    assert ctl.measuring == {}


@pytest.mark.parametrize("field", ["requested", "predicted_gain_s", "charged_cost_s"])
@pytest.mark.parametrize("value", ["1", None, "nan", [1], True])
def test_a_record_with_a_bad_number_or_a_newer_field_is_still_read(
        field: str, value: Any) -> None:
    m = Migration(id="m1", namespace="default", pod="a", pod_uid="u-a", source="node-1",
                  target="node-2", kind="job", owner="j-a", owner_uid="ju-a",
                  reason="progress", phase="placing", started=1.0, deadline=2.0)
    data = json.loads(m.record())
    data[field] = value
    data["added_by_a_newer_release"] = 1
    back = Migration.from_record(json.dumps(data))
    assert back is not None and back.id == "m1"
    assert getattr(back, field) == (0.0 if field == "requested" else None)
