"""Issue 32, the cases the plane tests do not reach: a target that is gone, NotReady or no
longer fits the pod cancels the move before the eviction, and the evicting phase has a deadline.
``test_migration_deletes_plane.py`` shows a cordoned target and the user's deletes on the real
API server."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from specon_manager.kube import KubeError, pod_path
from specon_manager.metrics import ManagerMetrics
from specon_manager.migration import Migration, MigrationController
from specon_manager.migration.dispatch import step
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState

NS = "default"


def node(name: str, ready: str = "True", **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                                       "reason": "KubeletReady" if ready == "True" else
                                       "NodeStatusUnknown"}]}}


def source_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "metadata": {"name": "p", "namespace": NS, "uid": "u-p"},
            "spec": {"nodeName": "w1", "nodeSelector": {"pool": "a"},
                     "containers": [{"name": "main"}]},
            "status": {"phase": "Running"}}


class Kube:
    """The objects by path; records writes."""

    def __init__(self, *objs: tuple[str, dict[str, Any]]) -> None:
        self.objs = dict(objs)
        self.writes: list[tuple[str, str]] = []
        self.events: list[str] = []

    def get(self, path: str) -> dict[str, Any] | None:
        return self.objs.get(path)

    def patch(self, path: str, body: Any, kind: str = "merge") -> dict[str, Any]:
        self.writes.append(("patch", path))
        if path not in self.objs:
            raise KubeError(404, "NotFound", path)
        return self.objs[path]

    def delete(self, path: str, body: Any = None) -> None:
        self.writes.append(("delete", path))
        self.objs.pop(path, None)

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/events"):
            self.events.append(f"{body['reason']}: {body['note']}")
        else:
            self.writes.append(("create", path))
        return body


def controller(kube: Kube, metrics: ManagerMetrics | None = None) -> MigrationController:
    """A migration controller on ``kube``, its clock at 1000 s."""
    return MigrationController(kube, ClusterState(stale_after_s=30),  # type: ignore[arg-type]
                               ManagerSettings(kubernetes=False), metrics or ManagerMetrics(),
                               clock=lambda: 1000.0)


def evicting(deadline: float = 1e12) -> Migration:
    return Migration(id="abcdef123456", namespace=NS, pod="p", pod_uid="u-p", source="w1",
                     target="w2", kind="pod", owner="", owner_uid="", reason="converged",
                     phase="evicting", started=0.0, deadline=deadline)


def run(target: dict[str, Any] | None, m: Migration) -> tuple[MigrationController, Kube]:
    objs = [(pod_path(NS, "p"), source_pod())]
    if target is not None:
        objs.append(("/api/v1/nodes/w2", target))
    kube = Kube(*objs)
    ctl = controller(kube)
    ctl.migrations[m.id] = m
    step(ctl, m)
    return ctl, kube


@pytest.mark.parametrize(("target", "why"), [
    (None, "the target w2 is gone"),
    (node("w2", ready="Unknown", pool="a"), "the target w2 is NotReady (NodeStatusUnknown)"),
    (node("w2", pool="b"), "the pod no longer fits the target w2"),
    ({**node("w2", pool="a"), "spec": {"unschedulable": True}}, "the target w2 was cordoned"),
])
def test_an_unfit_target_cancels_the_move_and_nothing_is_evicted(
    target: dict[str, Any] | None, why: str,
) -> None:
    ctl, kube = run(target, evicting())
    assert ctl.in_flight() == []
    assert not any(op == "create" for op, _ in kube.writes)  # no replacement, no eviction
    assert ("delete", pod_path(NS, "p-mabcdef")) in kube.writes  # any replacement undone
    assert kube.events[-1].startswith("MigrationCancelled: migration abcdef123456: " + why)
    assert kube.events[-1].endswith("the job keeps running on w1")


def test_a_fit_target_is_evicted_to() -> None:
    ctl, kube = run(node("w2", pool="a"), evicting())
    assert ("create", pod_path(NS, "p") + "/eviction") in kube.writes
    assert [m.phase for m in ctl.in_flight()] == ["placing"]


def test_the_evicting_phase_has_a_deadline() -> None:
    ctl, kube = run(node("w2", pool="a"), evicting(deadline=999.0))
    assert ctl.in_flight() == []
    assert not any(op == "create" for op, _ in kube.writes)
    assert "not evicted within 300 s" in kube.events[-1]


def test_a_replacement_its_user_deleted_ends_the_migration_cancelled_and_is_not_made_again(
) -> None:
    m = Migration(id="abcdef123456", namespace=NS, pod="p", pod_uid="u-p", source="w1",
                  target="w2", kind="pod", owner="", owner_uid="", reason="converged",
                  phase="placing", started=0.0, deadline=1e12, replacement="p-mabcdef")
    kube = Kube(("/api/v1/nodes/w2", node("w2", pool="a")))  # the source is gone already
    metrics = ManagerMetrics()
    ctl = controller(kube, metrics)
    ctl.migrations[m.id] = m
    step(ctl, m)
    assert ctl.in_flight() == [] and ctl.busy_nodes() == set()
    assert not any(op == "create" for op, _ in kube.writes)
    assert metrics.migrations.labels("cancelled")._value.get() == 1
    assert metrics.migrations.labels("failed")._value.get() == 0


def test_a_source_going_after_an_eviction_whose_answer_was_lost_is_not_taken_for_a_delete(
) -> None:
    """The eviction went through but its answer was lost (a timeout): the next pass sees the
    source terminating, which is this manager's doing, and goes on to placing."""

    class Lossy(Kube):
        def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
            md = self.objs[pod_path(NS, "p")]["metadata"]
            if path.endswith("/eviction") and not md.get("deletionTimestamp"):
                md["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                raise OSError("timed out")
            return super().create(path, body)

    kube = Lossy((pod_path(NS, "p"), source_pod()), ("/api/v1/nodes/w2", node("w2", pool="a")))
    ctl = controller(kube)
    m = evicting()
    ctl.migrations[m.id] = m
    ctl.reconcile()  # the eviction's answer is lost: retried
    assert [x.phase for x in ctl.in_flight()] == ["evicting"]
    ctl.reconcile()
    assert [x.phase for x in ctl.in_flight()] == ["placing"]
    assert ("delete", pod_path(NS, "p-mabcdef")) not in kube.writes  # the replacement kept
    assert not [e for e in kube.events if e.startswith("MigrationCancelled")]


class GoneFirst(Kube):
    """The source is deleted by someone else between the phase's look and its eviction (the
    eviction answers 404): ``lost`` makes the first eviction go through, its answer lost."""

    def __init__(self, *objs: tuple[str, dict[str, Any]], lost: bool = False) -> None:
        super().__init__(*objs)
        self.lost = lost

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/pods"):
            self.objs[f"{path}/{body['metadata']['name']}"] = body
        if not path.endswith("/eviction"):
            return super().create(path, body)
        self.objs.pop(pod_path(NS, "p"), None)
        if self.lost:
            self.lost = False
            raise OSError("timed out")
        raise KubeError(404, "NotFound", path)


@pytest.mark.parametrize("lost", [False, True])
def test_a_source_deleted_by_someone_else_just_before_its_eviction_ends_the_move(
        lost: bool, caplog: pytest.LogCaptureFixture) -> None:
    """A 404 to the first eviction means another hand deleted the source after the phase
    looked: the move ends as a user's delete and the gated replacement, never run, is deleted
    (the fault campaign saw j0013 come back). A 404 after an eviction whose answer was lost
    is this manager's own doing: the move goes on."""
    kube = GoneFirst((pod_path(NS, "p"), source_pod()), ("/api/v1/nodes/w2",
                                                          node("w2", pool="a")), lost=lost)
    ctl = controller(kube)
    m = evicting()
    ctl.migrations[m.id] = m
    caplog.set_level("INFO")
    ctl.reconcile()
    if lost:
        assert [x.phase for x in ctl.in_flight()] == ["evicting"]
        kube.objs[pod_path(NS, "p")] = source_pod()  # still there when looked at again
        ctl.reconcile()
        assert [x.phase for x in ctl.in_flight()] == ["placing"]
        assert ("delete", pod_path(NS, "p-mabcdef")) not in kube.writes
    else:
        assert ctl.in_flight() == []
        assert ("delete", pod_path(NS, "p-mabcdef")) in kube.writes, kube.writes
        assert "cancelled: the source pod was deleted before its eviction" in caplog.text


def test_in_phase_placing_a_source_gone_before_the_eviction_a_restart_sends_is_no_delete(
        ) -> None:
    """A manager stopped between the placing record and its eviction sends it on restart; a
    404 there leaves the move going on, as placing does whenever it finds the source gone
    (a bare pod's user delete is then its replacement's deletion)."""
    kube = GoneFirst((pod_path(NS, "p"), source_pod()), ("/api/v1/nodes/w2",
                                                          node("w2", pool="a")))
    ctl = controller(kube)
    m = replace(evicting(), phase="placing", replacement="p-mabcdef")
    ctl.migrations[m.id] = m
    ctl.reconcile()
    assert [x.phase for x in ctl.in_flight()] == ["placing"]
    assert ("delete", pod_path(NS, "p-mabcdef")) not in kube.writes
