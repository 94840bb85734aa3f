"""Issue 32 (item 2) on the real control plane: a manager removed for good while a bare pod's
replacement waits behind its scheduling gate (phase placing). At SIGTERM the leader waits for
the evicted source to be gone, then ungates the replacement, pinned to the target while that
can take it, else as an unpinned copy; the job runs again with no manager at all, and a
manager that starts later finishes the migration from its record, creating nothing. The
fixtures and stand-ins are test_manager_plane.py's."""

# The fixtures are imported (registered by name) and then named as arguments, as pytest does.
# ruff: noqa: F811

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from planelib import Plane
from planemanager import AgentStandIn, Api, JobStandIn, ManagerProcess, wait_for
from test_manager_plane import (  # noqa: F401  (fixtures, registered by the import)
    api,
    assert_resumed_exactly,
    converged_bare_job,
    drive,
    ext_port,
    manager,
    mnodes,
    play_kubelet,
    scheduler,
    tag,
    tokens,
    train_pod,
)
from test_migration_deletes_plane import HOLD, notes, release

pytestmark = pytest.mark.plane


def gated(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("schedulingGates"))


def to_placing(plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], ns: str,
               tag: str, manager: ManagerProcess, tmp_path: Path,
               ) -> tuple[dict[str, AgentStandIn], JobStandIn, str]:
    """A bare job on node 3 migrated towards node 1 up to placing: evicted after its verified
    checkpoint, its source held terminating (as by a kubelet still saving), its replacement
    made and gated. Returns the agents, the job and the replacement's name."""
    pod = train_pod("train-h", tag, node=mnodes[3])
    pod["metadata"]["annotations"] = {HOLD: "true"}
    agents, job, reply = converged_bare_job(plane, api, mnodes, tokens, ns, manager, tmp_path,
                                            pod)
    assert reply["decision"] == "migrate" and reply["target"] == mnodes[1], reply

    def waiting(pods: list[dict[str, Any]]) -> Any:
        # the same read the kubelet stand-in acted on: the job got its SIGTERM
        src = [p for p in pods if p["metadata"]["name"] == "train-h"]
        reps = [p for p in pods if p["metadata"]["name"].startswith("train-h-")]
        return src and src[0]["metadata"].get("deletionTimestamp") and reps

    rep = drive(api, ns, agents, [job], waiting)[0]
    assert gated(rep) and job.starts == 1 and not job.running  # placing: it waits
    name: str = rep["metadata"]["name"]
    return agents, job, name


def resumed(api: Api, ns: str, job: JobStandIn, agents: dict[str, AgentStandIn]) -> bool:
    play_kubelet(job, api.pods(ns), ns, agents)
    return job.starts > 1


def cleanup(plane: Plane, api: Api, ns: str) -> None:
    """The replacements carry the source's annotations: let KWOK delete them normally."""
    for p in api.pods(ns):
        if p["metadata"]["name"].startswith("train-h"):
            release(plane, ns, p["metadata"]["name"])


@pytest.mark.parametrize("target", ["fit", "cordoned"])
def test_a_manager_stopped_while_the_replacement_waits_hands_it_to_the_scheduler(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path, target: str,
) -> None:
    """Before the fix the replacement stayed gated for good once the manager was gone: the
    job's only pod could never run. ``cordoned``: the target stopped taking pods meanwhile,
    so a pod pinned to it would pend for good; the copy handed over is unpinned."""
    ns = plane_namespace
    manager.start()
    try:
        agents, job, name = to_placing(plane, api, mnodes, tokens, ns, tag, manager, tmp_path)
        if target == "cordoned":
            plane.kubectl("cordon", mnodes[1])
        manager.terminate()  # SIGTERM to the last replica: no manager comes back for now
        wait_for("the manager waits for the source, or exits", lambda: (
            "waiting up to" in manager.log.read_text() or not manager.alive()))
        release(plane, ns, "train-h")  # the source's kubelet is done: the pod goes
        assert manager.wait_exit() == 0
        pods = [p for p in api.pods(ns) if p["metadata"]["name"].startswith("train-h-")]
        assert [p["metadata"]["name"] for p in pods if gated(p)] == [], manager.tail(20)
        handed = notes(api, ns, "MigrationHandedOver")
        # No manager at all: the scheduler places it (the extender away is ignorable) and the
        # job resumes from its checkpoint.
        wait_for("the job running again, with no manager",
                 lambda: resumed(api, ns, job, agents))
        if target == "fit":
            assert job.pod == name and job.node == mnodes[1]
            assert f"pinned to the reserved target {mnodes[1]}" in handed
        else:
            assert job.pod == name + "-u" and job.node not in (mnodes[1], mnodes[3])
            assert f"the target {mnodes[1]} was cordoned" in handed
        assert_resumed_exactly(job)
        # A manager that starts again finishes the migration from its record: no second
        # replacement, nothing left in flight.
        manager.start()
        wait_for("MigrationCompleted", lambda: "MigrationCompleted" in api.events(ns))
        left = [p for p in api.pods(ns) if p["metadata"]["name"].startswith("train-h")]
        assert [p["metadata"]["name"] for p in left] == [job.pod]
        assert not left[0]["metadata"].get("labels", {}).get("specon.io/migrating")
        result = "completed" if target == "fit" else "elsewhere"
        assert f'specon_manager_migrations_total{{result="{result}"}} 1.0' in httpx.get(
            f"{manager.url}/metrics").text
    finally:
        release(plane, ns, "train-h")
        if target == "cordoned":
            plane.kubectl("uncordon", mnodes[1])
        cleanup(plane, api, ns)


def test_a_source_still_terminating_at_shutdown_keeps_its_replacement_gated(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path,
) -> None:
    """The evicted source outlives the manager's wait (``shutdown_handover_s``): ungating would
    run the job twice, so the replacement stays gated, with a Warning event that says so.
    The documented commands find it and, once the source is gone, release it; a manager that
    starts later finishes the migration from its record."""
    ns = plane_namespace
    manager.start(shutdown_handover_s=1)
    try:
        agents, job, name = to_placing(plane, api, mnodes, tokens, ns, tag, manager, tmp_path)
        manager.terminate()
        assert manager.wait_exit() == 0
        rep = api.pod(ns, name)
        assert rep is not None and gated(rep)
        assert "stays gated so that the job never runs twice" in notes(
            api, ns, "MigrationNotHandedOver")
        # No manager comes back: the way out docs/user-guide.md ("Uninstall") gives, word for
        # word. The gated pods, with the source each waits for:
        found = plane.kubectl(
            "get", "pods", "-A", "-l", "specon.io/migrating=true", "-o",
            "jsonpath={range .items[?(@.spec.schedulingGates)]}{.metadata.namespace}{\"\\t\"}"
            "{.metadata.name}{\"\\t\"}{.metadata.annotations.specon\\.io/migration}{\"\\n\"}"
            "{end}").stdout.splitlines()
        mine = [line.split("\t") for line in found if line.startswith(ns + "\t")]
        assert [(n, json.loads(record)["pod"]) for _, n, record in mine] == [(name, "train-h")]
        release(plane, ns, "train-h")
        wait_for("train-h gone", lambda: api.pod(ns, "train-h") is None)  # only then
        plane.kubectl("patch", "pod", "-n", ns, name, "--type=json", "-p",
                      '[{"op":"remove","path":"/spec/schedulingGates"}]')
        wait_for("the job running again", lambda: resumed(api, ns, job, agents))
        assert job.pod == name and job.node == mnodes[1]
        assert_resumed_exactly(job)
        manager.start()  # one that comes back later finishes the migration, creating nothing
        wait_for("MigrationCompleted", lambda: "MigrationCompleted" in api.events(ns))
        assert [p["metadata"]["name"] for p in api.pods(ns)
                if p["metadata"]["name"].startswith("train-h")] == [name]
    finally:
        release(plane, ns, "train-h")
        cleanup(plane, api, ns)


def test_in_a_rolling_update_the_next_leader_finishes_what_the_old_one_handed_over(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path,
) -> None:
    """SIGTERM to the leader while a standby waits (a rolling update): the leader, renewing its
    Lease meanwhile, hands the replacement over and releases the Lease; the standby takes it,
    finds the replacement ungated, creates nothing and completes the migration."""
    ns = plane_namespace
    lease = dict(leader_election=True, lease_namespace=ns, lease_duration_s=2,
                 renew_period_s=0.5)
    manager.start(identity="replica-a", **lease)
    (tmp_path / "b").mkdir()
    standby = ManagerProcess(plane, tmp_path / "b", tokens, identity="replica-b", **lease)
    try:
        standby.start(wait="serving")
        agents, job, name = to_placing(plane, api, mnodes, tokens, ns, tag, manager, tmp_path)
        manager.terminate()
        wait_for("the leader waits for the source, or exits", lambda: (
            "waiting up to" in manager.log.read_text() or not manager.alive()))
        release(plane, ns, "train-h")
        assert manager.wait_exit() == 0
        assert "MigrationHandedOver" in api.events(ns)
        wait_for("the standby leading", lambda: standby.answers("/readyz"))
        for a in agents.values():
            a.url = standby.url
        wait_for("the job running again", lambda: resumed(api, ns, job, agents))
        assert job.pod == name and job.node == mnodes[1]
        assert_resumed_exactly(job)
        wait_for("MigrationCompleted", lambda: "MigrationCompleted" in api.events(ns))
        assert [p["metadata"]["name"] for p in api.pods(ns)
                if p["metadata"]["name"].startswith("train-h")] == [name]
        assert 'specon_manager_migrations_total{result="completed"} 1.0' in httpx.get(
            f"{standby.url}/metrics").text
    finally:
        standby.kill()
        release(plane, ns, "train-h")
        cleanup(plane, api, ns)
