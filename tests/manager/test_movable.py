"""Which pods the manager may move: a Job whose pod the eviction would fail is refused (issue 15:
a Job with ``backoffLimit: 0`` and no podFailurePolicy was accepted, and the eviction failed the
whole Job). The plane test ``test_pods_that_did_not_opt_in_or_cannot_be_recreated_are_never_moved``
shows the same refusal through the real API server."""

from __future__ import annotations

from typing import Any

import pytest

from specon.wire import Heartbeat, JobReport
from specon_manager.metrics import ManagerMetrics
from specon_manager.migration import MigrationController, ignores_disruption, why_not_movable
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState

IGNORE = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def pod() -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "n", "uid": "u", "labels": {
        "specon.io/migratable": "true"}, "ownerReferences": [
        {"kind": "Job", "name": "j", "uid": "ju", "controller": True}]},
        "status": {"phase": "Running"}}


def job(**spec: Any) -> dict[str, Any]:
    failed = spec.pop("failed", 0)
    return {"metadata": {"name": "j", "namespace": "n", "uid": "ju"},
            "spec": {"podReplacementPolicy": "Failed", **spec}, "status": {"failed": failed}}


@pytest.mark.parametrize(("spec", "refused"), [
    ({"backoffLimit": 0}, True),
    ({"backoffLimit": 2, "failed": 2}, True),
    ({"backoffLimit": 2, "failed": 1}, False),
    ({}, False),  # the default backoffLimit, 6
    ({"backoffLimit": 0, "podFailurePolicy": IGNORE}, False),
    ({"backoffLimit": 0, "podFailurePolicy": {"rules": [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]}}, True),
    ({"backoffLimit": 0, "podFailurePolicy": {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget",
                                                  "status": "False"}]}]}}, True),
    ({"backoffLimit": "0"}, True),  # not a number: not trusted
])
def test_a_job_the_eviction_would_fail_is_not_moved(spec: dict[str, Any], refused: bool) -> None:
    why = why_not_movable(pod(), job(**spec), "converged")
    assert (why is not None and "would fail its Job" in why) == refused, why


@pytest.mark.parametrize("policy", [None, "x", {"rules": "x"}, {"rules": [1, {"action": 2}]},
                                    {"rules": [{"action": "Ignore", "onPodConditions": "x"}]}])
def test_malformed_failure_policies_ignore_nothing(policy: Any) -> None:
    assert ignores_disruption(policy) is False


def owned_by(kind: str) -> dict[str, Any]:
    p = pod()
    p["metadata"]["ownerReferences"] = [{"kind": kind, "name": "o", "uid": "ou",
                                         "controller": True}]
    return p


def owner(kind: str, replicas: int | None = 1, **ann: str) -> dict[str, Any]:
    spec = {} if replicas is None else {"replicas": replicas}
    return {"kind": kind, "metadata": {"name": "o", "namespace": "n", "uid": "ou",
                                       "annotations": ann}, "spec": spec}


@pytest.mark.parametrize(("kind", "replicas", "replicasets", "expect"), [
    ("StatefulSet", 1, False, None),
    ("StatefulSet", None, False, None),  # replicas defaults to 1
    ("StatefulSet", 3, False, "3 replicas"),
    ("ReplicaSet", 1, False, "migrate_replicaset_pods"),
    ("ReplicaSet", 1, True, None),
    ("ReplicaSet", 2, True, "2 replicas"),
])
def test_statefulset_and_replicaset_pods_move_when_one_copy_at_a_time_is_guaranteed(
    kind: str, replicas: int | None, replicasets: bool, expect: str | None,
) -> None:
    why = why_not_movable(owned_by(kind), owner(kind, replicas), "converged", replicasets)
    assert why is None if expect is None else (why is not None and expect in why), why


def test_other_owners_and_vanished_owners_are_refused_with_the_reason() -> None:
    why = why_not_movable(owned_by("DaemonSet"), None, "converged", True)
    assert why is not None and "owned by a DaemonSet" in why and "StatefulSet" in why
    why = why_not_movable(owned_by("StatefulSet"), None, "converged")
    assert why == "the pod's StatefulSet is gone"


def test_the_marker_on_the_owner_says_the_job_was_moved_already() -> None:
    marked = owner("StatefulSet", 1, **{"specon.io/migrated": "abc"})
    assert why_not_movable(owned_by("StatefulSet"), marked, "converged") == (
        "the job was already migrated")
    assert why_not_movable(owned_by("StatefulSet"), marked, "rebalance") is None


class _Kube:
    """Just enough of the API for MigrationController.start (no cluster here)."""

    def __init__(self, p: dict[str, Any]) -> None:
        self.pod = p
        self.writes: list[str] = []

    def get(self, path: str) -> dict[str, Any] | None:
        return self.pod if path.endswith("/pods/p") else None

    def list(self, path: str, **params: str) -> list[dict[str, Any]]:
        return []

    def patch(self, path: str, body: Any, kind: str = "merge") -> dict[str, Any]:
        self.writes.append(path)
        return {}

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(path)
        return {}


def _start(p: dict[str, Any]) -> tuple[Any, _Kube]:
    """MigrationController.start on ``p`` (on node-1 with two progressing jobs; node-2 empty)."""
    kube = _Kube(p)
    state = ClusterState(stale_after_s=30)
    for node, jobs in (("node-2", []), ("node-1", ["p", "x", "y"])):
        state.record(Heartbeat(node=node, time=1.0, seq=1, capacity_cpus=4, load_cores=0,
                               jobs=[JobReport(namespace="n", pod=j, category="CC" if j == "p"
                                               else "PC") for j in jobs]))
    ctl = MigrationController(kube, state, ManagerSettings(kubernetes=False),  # type: ignore[arg-type]
                              ManagerMetrics())
    return ctl.start(p), kube


def test_a_pod_that_can_never_move_stays_marked_so_its_agent_stops_asking() -> None:
    """The simulator's rule (specon.core.scoring.decide_reallocation): a job that cannot move
    is judged best where it is and marked migrated; nothing is written to the pod."""
    p = pod()
    p["metadata"]["labels"] = {}
    p["metadata"]["ownerReferences"] = []
    p["spec"] = {"nodeName": "node-1"}
    reply, kube = _start(p)
    assert (reply.decision, reply.migrated, reply.target) == ("stay", True, "node-1")
    assert "opt in" in reply.reason and kube.writes == []
    # the same pod, opted in, moves to the empty node
    p["metadata"]["labels"] = {"specon.io/migratable": "true"}
    reply, kube = _start(p)
    assert (reply.decision, reply.migrated, reply.target) == ("migrate", True, "node-2")


def test_a_pod_that_is_ending_is_refused_unmarked() -> None:
    p = pod()
    p["metadata"]["ownerReferences"] = []
    p["spec"] = {"nodeName": "node-1"}
    p["status"] = {"phase": "Succeeded"}
    reply, kube = _start(p)
    assert (reply.decision, reply.migrated) == ("refused", False)
    assert reply.reason == "the pod is not running" and kube.writes == []


def test_a_copy_gets_the_owners_cpu_limit_back() -> None:
    """The manager copies a bare pod's spec for its replacement; with the resize actuator the
    spec holds the agent's limit, so the copy is given the owner's (as the source's agent
    reports it), and a request the agent lowered with the limit stays at most the limit."""
    from specon_manager.migration import with_cpu_limit

    spec = {"containers": [
        {"name": "main", "resources": {"limits": {"cpu": "400m"}, "requests": {"cpu": "400m"}}},
        {"name": "side", "resources": {"limits": {"cpu": "1"}}}]}
    with_cpu_limit(spec, "main", 2.0)
    assert spec["containers"][0]["resources"] == {"limits": {"cpu": "2000m"},
                                                  "requests": {"cpu": "400m"}}
    assert spec["containers"][1]["resources"] == {"limits": {"cpu": "1"}}
    with_cpu_limit(spec, "main", 0.25)
    assert spec["containers"][0]["resources"] == {"limits": {"cpu": "250m"},
                                                  "requests": {"cpu": "250m"}}


# -- Kubeflow PyTorchJob and JobSet (issue 18) ------------------------------------------------
def pytorchjob(restart: str | None = "OnFailure", backoff: Any = None,
               **replicas: Any) -> dict[str, Any]:
    """A PyTorchJob with these replica counts (default: one Master)."""
    specs = {rtype: {"replicas": n, "template": {}} for rtype, n in (
        replicas or {"Master": 1}).items()}
    for rs in specs.values():
        if restart is not None:
            rs["restartPolicy"] = restart
    spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
    if backoff is not None:
        spec["runPolicy"] = {"backoffLimit": backoff}
    return {"kind": "PyTorchJob", "metadata": {"name": "o", "namespace": "n", "uid": "ou"},
            "spec": spec}


@pytest.mark.parametrize(("owner_obj", "expect"), [
    (pytorchjob(), None),
    (pytorchjob(restart=None), None),  # the operator's default restartPolicy: OnFailure
    (pytorchjob("Always"), None),
    (pytorchjob("ExitCode"), None),  # SIGTERM's exit 143 is retryable (>= 128)
    (pytorchjob(Worker=1), None),  # a single Worker, no Master
    (pytorchjob(backoff=3), None),
    (pytorchjob("Never"), "restartPolicy Never"),
    (pytorchjob("Bogus"), "restartPolicy Bogus"),
    (pytorchjob(Master=1, Worker=1), "1 Master, 1 Worker"),
    (pytorchjob(Master=2), "2 Master"),
    (pytorchjob(Master="1"), "train together"),  # not a number: not trusted
    (pytorchjob(backoff=0), "runPolicy.backoffLimit 0"),
])
def test_a_pytorchjob_pod_moves_only_when_single_replica_and_recreated(
    owner_obj: dict[str, Any], expect: str | None,
) -> None:
    why = why_not_movable(owned_by("PyTorchJob"), owner_obj, "converged")
    assert why is None if expect is None else (why is not None and expect in why), why


def test_a_pytorchjob_with_no_replica_specs_is_refused() -> None:
    why = why_not_movable(owned_by("PyTorchJob"), pytorchjob(Master=0), "converged")
    assert why is not None and "single-replica" in why


def jobset_job(**spec: Any) -> dict[str, Any]:
    j = job(**spec)
    j["kind"] = "Job"
    j["metadata"]["ownerReferences"] = [{"kind": "JobSet", "name": "s", "uid": "su",
                                         "controller": True}]
    return j


def jobset(*rjobs: tuple[int, int]) -> dict[str, Any]:
    """A JobSet with these replicatedJobs as (replicas, parallelism)."""
    return {"kind": "JobSet", "metadata": {"name": "s", "namespace": "n", "uid": "su"},
            "spec": {"replicatedJobs": [
                {"name": f"r{i}", "replicas": r,
                 "template": {"spec": {"parallelism": p, "podReplacementPolicy": "Failed"}}}
                for i, (r, p) in enumerate(rjobs)]}}


@pytest.mark.parametrize(("parent", "spec", "expect"), [
    (jobset((1, 1)), {"podFailurePolicy": IGNORE, "backoffLimit": 0}, None),
    (jobset((1, 1)), {}, None),  # a retry left: the Job does not fail, so neither the set
    (jobset((1, 1)), {"backoffLimit": 0}, "would fail its Job"),
    (jobset((2, 1)), {"podFailurePolicy": IGNORE}, "runs 2 pods"),
    (jobset((1, 2)), {"podFailurePolicy": IGNORE}, "runs 2 pods"),
    (jobset((1, 1), (1, 1)), {"podFailurePolicy": IGNORE}, "runs 2 pods"),
    (None, {"podFailurePolicy": IGNORE}, "the pod's JobSet is gone"),
])
def test_a_jobset_pod_moves_through_its_job_when_the_set_runs_one_pod(
    parent: dict[str, Any] | None, spec: dict[str, Any], expect: str | None,
) -> None:
    why = why_not_movable(pod(), jobset_job(**spec), "converged", parent=parent)
    assert why is None if expect is None else (why is not None and expect in why), why


def test_a_job_of_another_controller_keeps_the_job_rules_alone() -> None:
    """A CronJob's Job (a controller SpeCon does not read) moves by the Job's rules."""
    j = job(podFailurePolicy=IGNORE)
    j["metadata"]["ownerReferences"] = [{"kind": "CronJob", "name": "c", "uid": "cu",
                                         "controller": True}]
    assert why_not_movable(pod(), j, "converged") is None


def test_a_refused_opted_in_pod_gets_an_event_with_the_reason() -> None:
    """An opted-in pod whose owner's shape cannot move: answered stay (marked, so its agent
    stops asking), nothing written to the pod, one MigrationRefused event saying why."""
    p = pod()
    p["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "d", "uid": "du",
                                         "controller": True}]
    p["spec"] = {"nodeName": "node-1"}
    reply, kube = _start(p)
    assert (reply.decision, reply.migrated) == ("stay", True)
    assert "owned by a DaemonSet" in reply.reason
    assert kube.writes == ["/apis/events.k8s.io/v1/namespaces/n/events"]
