"""Issue 32 on the real control plane: a user's delete is honoured at every phase of a
migration (nothing the user deleted comes back, the migration ends as cancelled at once and
frees its nodes), and a target that became unfit after it was reserved cancels the move
before the source is evicted. The fixtures and stand-ins are test_manager_plane.py's."""

# The fixtures are imported (registered by name) and then named as arguments, as pytest does.
# ruff: noqa: F811

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from planelib import Plane
from planemanager import (
    AgentStandIn,
    Api,
    JobStandIn,
    ManagerProcess,
    apply,
    assert_placed,
    running_on,
    wait_for,
)
from test_manager_plane import (  # noqa: F401  (fixtures, registered by the import)
    SCHED,
    SETUP_BEAT_S,
    agents_for,
    api,
    beat_all,
    converged_bare_job,
    crowded_source,
    ext_port,
    live,
    manager,
    mnodes,
    scheduler,
    set_layout,
    start_job,
    tag,
    tokens,
    train_job,
    train_pod,
)

pytestmark = pytest.mark.plane

#: KWOK leaves a pod with this annotation terminating once it is deleted, as a kubelet still
#: running the job's shutdown save does (planelib's KWOK stages).
HOLD = "specon.test/kubelet-gone"


def cancelled_count(manager: ManagerProcess) -> float:
    for line in httpx.get(f"{manager.url}/metrics").text.splitlines():
        if line.startswith('specon_manager_migrations_total{result="cancelled"}'):
            return float(line.split()[-1])
    return 0.0


def notes(api: Api, ns: str, reason: str) -> str:
    return " ".join(e.get("note", "") for e in api.event_items(ns) if e["reason"] == reason)


def release(plane: Plane, ns: str, pod: str) -> None:
    """Let KWOK finish deleting a held pod."""
    plane.kubectl("annotate", "-n", ns, "pod", pod, f"{HOLD}-", check=False)


def second_migration_starts(plane: Plane, api: Api, ns: str, tag: str, node: str,
                            agents: dict[str, AgentStandIn], tmp_path: Path,
                            manager: ManagerProcess) -> dict[str, Any]:
    """The source node takes part in a new migration: it was released. That one is ended by
    deleting its pod too (no record left in flight for the next test's manager)."""
    apply(plane, ns, train_pod("again", tag, node=node))
    wait_for("again running", lambda: running_on(api, ns, "again"))
    job = JobStandIn(tmp_path / "ckpt-again", "again")
    start_job(api, ns, agents, job, "again")
    job.run_steps(2)
    beat_all(agents)
    reply = agents[node].reallocate(ns, "again")
    plane.kubectl("delete", "-n", ns, "pod", "again", "--wait=false")
    wait_for("its migration cancelled",
             lambda: "cancelled: the pod again " in manager.log.read_text())
    return reply


def test_a_bare_pod_deleted_while_its_migration_waits_for_the_checkpoint_never_comes_back(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path,
) -> None:
    """Issue 32 (1a): ``kubectl delete pod`` while the manager waits for the checkpoint. The pod
    still reads Running while it terminates, and the job's shutdown save answers the pending
    request; before the fix the manager took that as its checkpoint and recreated the pod on
    the target."""
    ns = plane_namespace
    manager.start()
    pod = train_pod("train-d", tag, node=mnodes[3])
    pod["metadata"]["annotations"] = {HOLD: "true"}
    agents, job, reply = converged_bare_job(plane, api, mnodes, tokens, ns, manager, tmp_path,
                                            pod)
    assert reply["decision"] == "migrate" and reply["target"] == mnodes[1], reply
    agents[mnodes[3]].beat()  # the reply carries the request: the agent writes request.json
    try:
        plane.kubectl("delete", "-n", ns, "pod", "train-d", "--wait=false")
        # the kubelet's SIGTERM: the job saves (answering the request) and the agent, which
        # still sees the container, reports that save
        job.sigterm()
        assert job.saved() is not None and job.exit_code == 143
        beat_all(agents)
        agents[mnodes[3]].drop("train-d")

        def outcome() -> str | None:
            beat_all(agents)
            if any(p["metadata"]["name"].startswith("train-d-") for p in api.pods(ns)):
                return "recreated"
            if "MigrationCancelled" in api.events(ns):
                return "cancelled"
            return None

        assert wait_for("the migration to end", outcome, timeout=20) == "cancelled"
        assert "deleted" in notes(api, ns, "MigrationCancelled")
    finally:
        release(plane, ns, "train-d")
    wait_for("train-d gone", lambda: api.pod(ns, "train-d") is None)
    # nothing comes back, however long the manager looks
    for _ in range(10):
        beat_all(agents)
        assert [p["metadata"]["name"] for p in api.pods(ns)
                if p["metadata"]["name"].startswith("train-d")] == []
        time.sleep(0.3)  # a reconcile pass or two
    assert job.starts == 1
    assert cancelled_count(manager) == 1
    again = second_migration_starts(plane, api, ns, tag, mnodes[3], agents, tmp_path,
                                    manager)
    assert again["decision"] == "migrate", again


def test_a_job_deleted_after_its_pod_saved_ends_the_migration_at_once(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path,
) -> None:
    """Issue 32 (1b): ``kubectl delete job`` once the pod has saved for the migration. Before
    the fix the migration went on to evicting and stayed there (the record's patch on the
    Job answered 404 at every pass), holding the target and the source node for good."""
    ns = plane_namespace
    manager.start()
    agents = agents_for(manager.url, tokens)
    set_layout(plane, agents, mnodes, ns, [["PC"] * 4, ["PC"] * 4, ["PC"] * 4, []])
    beat_all(agents, answered_within=SETUP_BEAT_S)
    spec = train_job("dj", tag)
    spec["spec"]["template"]["metadata"]["annotations"] = {HOLD: "true"}
    apply(plane, ns, spec)
    first = wait_for("the Job's pod running", lambda: [
        p for p in live(api.pods(ns), "dj-") if p["status"].get("phase") == "Running"])[0]
    name = first["metadata"]["name"]
    assert_placed(plane, first, mnodes[3], SCHED, manager.url)
    crowded_source(plane, mnodes, ns, agents)
    job = JobStandIn(tmp_path / "ckpt-dj", "dj-")
    start_job(api, ns, agents, job, name)
    job.run_steps(3)
    beat_all(agents)
    reply = agents[mnodes[3]].reallocate(ns, name)
    assert reply["decision"] == "migrate" and reply["target"] == mnodes[1], reply
    try:
        agents[mnodes[3]].beat()  # request.json written
        job.run_steps(1)  # the job saves for the migration
        saved = job.saved()
        assert saved is not None and saved["request"]
        plane.kubectl("delete", "-n", ns, "job", "dj", "--wait=false")
        wait_for("the Job gone", lambda: api.job(ns, "dj") is None)

        def outcome() -> str | None:
            beat_all(agents)  # the saved checkpoint is reported
            if "MigrationCancelled" in api.events(ns):
                return "cancelled"
            if "MigrationEvicted" in api.events(ns):
                return "evicted"
            return None

        assert wait_for("the migration to end", outcome, timeout=15) == "cancelled", (
            manager.tail(20))
        assert "Job dj was deleted" in notes(api, ns, "MigrationCancelled")
        assert cancelled_count(manager) == 1
        assert api.job(ns, "dj") is None  # nothing recreated
    finally:
        release(plane, ns, name)
    again = second_migration_starts(plane, api, ns, tag, mnodes[3], agents, tmp_path,
                                    manager)
    assert again["decision"] == "migrate", again


def test_a_target_cordoned_before_the_eviction_cancels_the_move_and_the_job_stays(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path,
) -> None:
    """Issue 32 (2): the target is cordoned after it was reserved. Before the fix the source
    was evicted all the same and the job was down until the placement timeout lifted the
    reservation; now the target is looked at again before the eviction."""
    ns = plane_namespace
    manager.start()
    agents, job, reply = converged_bare_job(plane, api, mnodes, tokens, ns, manager, tmp_path,
                                            train_pod("train-t", tag, node=mnodes[3]))
    assert reply["decision"] == "migrate" and reply["target"] == mnodes[1], reply
    uid = job.uid
    plane.kubectl("cordon", mnodes[1])
    try:
        def outcome() -> str | None:
            beat_all(agents)
            job.run_steps(1)  # the job saves when asked
            src = api.pod(ns, "train-t")
            if src is None or src["metadata"].get("deletionTimestamp"):
                return "evicted"
            if "MigrationCancelled" in api.events(ns):
                return "cancelled"
            return None

        assert wait_for("the migration to end", outcome, timeout=20) == "cancelled"
    finally:
        plane.kubectl("uncordon", mnodes[1])
    assert f"{mnodes[1]} was cordoned" in notes(api, ns, "MigrationCancelled")
    src = api.pod(ns, "train-t")
    assert src is not None and src["metadata"]["uid"] == uid
    assert running_on(api, ns, "train-t") == mnodes[3]
    assert job.running and job.starts == 1
    assert "MigrationEvicted" not in api.events(ns)
    assert [p["metadata"]["name"] for p in api.pods(ns)
            if p["metadata"]["name"].startswith("train-t")] == ["train-t"]
    assert cancelled_count(manager) == 1
