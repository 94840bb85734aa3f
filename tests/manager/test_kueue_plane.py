"""Kueue alongside SpeCon (issue 18), on the real plane with the real Kueue controller
(kueuelib.py): Kueue admits a batch/v1 Job against a ClusterQueue's quota, SpeCon's scheduler
places its pod, SpeCon migrates it once by checkpoint and restore, and Kueue's accounting holds
throughout: the Workload stays Admitted, the quota stays charged once, and is released when the
Job completes. docs/user-guide.md ("Kueue alongside SpeCon") documents the configuration."""

# Module fixtures of test_manager_plane.py are imported, so pytest registers them, and named as
# parameters:
# ruff: noqa: F811

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kueuelib import API, Kueue, kueue_bin
from planelib import Plane
from planemanager import Api, JobStandIn, ManagerProcess, apply, wait_for
from test_manager_plane import (  # noqa: F401  (module fixtures, registered here)
    SCHED,
    SETUP_BEAT_S,
    agents_for,
    api,
    assert_resumed_exactly,
    beat_all,
    crowded_source,
    drive,
    ext_port,
    live,
    manager,
    scheduler,
    set_layout,
    start_job,
    train_job,
)

from specon.quantity import parse_cpu

pytestmark = pytest.mark.plane

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: The ResourceFlavor's node label: Kueue adds it to the Job's pod template at admission.
#: Every node of the module has it.
FLAVOR_LABEL = "specon-test/kueue-flavor"
#: A node label that only some nodes get: a flavor on it leaves the others out.
POOL_LABEL = "specon-test/kueue-pool"
KUEUE = "/apis/" + API


@pytest.fixture(scope="module")
def tag() -> str:
    return f"q{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def qnodes(plane: Plane, tag: str) -> list[str]:
    return plane.add_nodes(4, prefix=tag, labels={"specon-test": tag, FLAVOR_LABEL: tag})


@pytest.fixture(scope="module")
def tokens(qnodes: list[str]) -> dict[str, str]:
    return {f"tok-{uuid.uuid4().hex}": n for n in qnodes}


@pytest.fixture(scope="module")
def kueue(plane: Plane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kueue]:
    k = Kueue(plane, kueue_bin(), tmp_path_factory.mktemp("kueue"))
    try:
        k.start()
        yield k
    finally:
        # Its webhooks fail closed (failurePolicy: Fail): they go before the controller, or
        # every later Job in the session's plane would be refused.
        for kind in ("mutating", "validating"):
            plane.kubectl("delete", f"{kind}webhookconfiguration",
                          f"kueue-{kind}-webhook-configuration", "--ignore-not-found",
                          check=False)
        k.stop()


def conditions(obj: dict[str, Any] | None) -> dict[str, str]:
    return {c["type"]: c["status"] for c in ((obj or {}).get("status") or {}).get(
        "conditions") or ()}


def usage(cq: dict[str, Any] | None, flavor: str) -> float:
    """The ClusterQueue's CPU in use (admitted workloads) in ``flavor``, in cores."""
    for f in ((cq or {}).get("status") or {}).get("flavorsUsage") or ():
        if f["name"] == flavor:
            for r in f.get("resources") or ():
                if r["name"] == "cpu":
                    return parse_cpu(r["total"])
    return 0.0


def queues(name: str, ns: str, node_labels: dict[str, str]) -> tuple[
        str, str, str, list[dict[str, Any]]]:
    """A ResourceFlavor (the nodes with ``node_labels``), a ClusterQueue with 1 CPU of it, a
    LocalQueue in ``ns`` feeding it: (flavor, cluster queue, local queue, objects)."""
    flavor, cq, lq = f"{name}-flavor", f"{name}-cq", "training"
    objs = [
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": flavor},
         "spec": {"nodeLabels": node_labels}},
        {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": cq},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": ["cpu"],
             "flavors": [{"name": flavor, "resources": [{"name": "cpu",
                                                          "nominalQuota": "1"}]}]}]}},
        {"apiVersion": API, "kind": "LocalQueue", "metadata": {"name": lq, "namespace": ns},
         "spec": {"clusterQueue": cq}},
    ]
    return flavor, cq, lq, objs


def kueue_job(name: str, tag: str, queue: str) -> dict[str, Any]:
    """The Job of docs/user-guide.md ("Kueue alongside SpeCon"): SpeCon's scheduler and opt-in
    labels in the template (train_job), Kueue's queue label, created suspended, an eviction
    ignored by the Job (it never counts against backoffLimit)."""
    job = train_job(name, tag)
    job["metadata"]["labels"] = {QUEUE_LABEL: queue}
    job["spec"]["suspend"] = True
    job["spec"]["podFailurePolicy"] = {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    return job


@pytest.mark.parametrize("pool", ["every-node", "not-the-best-target"])
def test_a_kueue_admitted_job_is_placed_and_migrated_by_specon_and_kueue_keeps_its_quota(
    plane: Plane, api: Api, qnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, kueue: Kueue, manager: ManagerProcess, tmp_path: Path, pool: str,
) -> None:
    """``every-node``: the flavor's nodes are all four, and the job moves to the worked
    example's best node (node 1). ``not-the-best-target``: node 1 is not one of the flavor's
    nodes, so the Job's pods (with the nodeSelector Kueue adds) cannot run there; SpeCon moves
    the job to the best node they can run on (node 2), at once, instead of reserving node 1
    until the placement timeout lifts the reservation."""
    ns = plane_namespace
    if pool == "every-node":
        flavor_labels, target = {FLAVOR_LABEL: tag}, qnodes[1]
        labelled: list[str] = []
    else:
        flavor_labels, target = {POOL_LABEL: tag}, qnodes[2]
        labelled = [qnodes[0], qnodes[2], qnodes[3]]
    for node in labelled:
        plane.kubectl("label", "node", node, f"{POOL_LABEL}={tag}")
    flavor, cq, lq, objs = queues(f"{tag}-{pool}", ns, flavor_labels)
    print(f"kueue log: {kueue.log}; started in {kueue.startup_seconds:.1f} s")
    try:
        for obj in objs:
            apply(plane, ns, obj)
        manager.start()
        agents = agents_for(manager.url, tokens)
        # node 3 the best place, so the Job's pod lands there
        set_layout(plane, agents, qnodes, ns, [["PC"] * 4, ["PC"] * 4, ["PC"] * 4, []])
        beat_all(agents, answered_within=SETUP_BEAT_S)
        # Kueue's mutating webhook is in the path: it suspends a queued Job created running.
        unsuspended = kueue_job("kq", tag, lq)
        unsuspended["spec"]["suspend"] = False
        dry = json.loads(plane.kubectl("create", "-n", ns, "--dry-run=server", "-o", "json",
                                       "-f", "-", input=json.dumps(unsuspended)).stdout)
        assert dry["spec"]["suspend"] is True
        apply(plane, ns, kueue_job("kq", tag, lq))
        jobobj = api.job(ns, "kq")
        assert jobobj is not None
        job_uid = jobobj["metadata"]["uid"]

        def workload() -> dict[str, Any] | None:
            items = (api.get(f"{KUEUE}/namespaces/{ns}/workloads") or {}).get("items") or []
            mine = [w for w in items if any(r.get("uid") == job_uid for r in
                                            w["metadata"].get("ownerReferences") or ())]
            assert len(mine) <= 1, [w["metadata"]["name"] for w in mine]
            return mine[0] if mine else None

        def cluster_queue() -> dict[str, Any] | None:
            return api.get(f"{KUEUE}/clusterqueues/{cq}")

        admitted = wait_for("the Workload admitted", lambda: (
            (w := workload()) is not None and conditions(w).get("Admitted") == "True" and w))
        wl_name, wl_uid = admitted["metadata"]["name"], admitted["metadata"]["uid"]
        admitted_at = next(c["lastTransitionTime"] for c in admitted["status"]["conditions"]
                           if c["type"] == "Admitted")
        assignment = admitted["status"]["admission"]["podSetAssignments"][0]
        assert admitted["status"]["admission"]["clusterQueue"] == cq
        assert assignment["flavors"] == {"cpu": flavor}
        assert parse_cpu(assignment["resourceUsage"]["cpu"]) == pytest.approx(0.1)

        first = wait_for("the Job's pod running", lambda: [
            p for p in live(api.pods(ns), "kq-") if p["status"].get("phase") == "Running"])[0]
        # Placed by SpeCon's scheduler and extender, where the test made it best; Kueue's
        # flavor pinned it to the flavor's nodes (all four) and gated nothing.
        assert first["spec"]["schedulerName"] == SCHED
        assert first["spec"]["nodeName"] == qnodes[3]
        assert flavor_labels.items() <= first["spec"]["nodeSelector"].items()
        assert not first["spec"].get("schedulingGates")
        # The ClusterQueue's status follows the admission shortly after.
        wait_for("the quota charged", lambda: usage(cluster_queue(), flavor) == pytest.approx(
            0.1) and (cluster_queue() or {})["status"].get("admittedWorkloads") == 1)
        name = first["metadata"]["name"]

        # Kueue's validating webhook is in the path too: a running Job may not change queue
        # (what the manager patches on the Job during a move, its own labels and
        # annotations, passes the same webhook).
        moved = plane.kubectl("label", "-n", ns, "job/kq", f"{QUEUE_LABEL}=elsewhere",
                              "--overwrite", "--dry-run=server", check=False)
        assert moved.returncode != 0 and '"vjob.kb.io" denied' in moved.stderr, moved
        crowded_source(plane, qnodes, ns, agents)
        job = JobStandIn(tmp_path / "ckpt-kq", "kq-")
        start_job(api, ns, agents, job, name)
        job.run_steps(3)
        beat_all(agents)
        # Every change of the namespace's Workloads from here on is replayed after the move.
        workloads = f"{KUEUE}/namespaces/{ns}/workloads"
        before = (api.get(workloads) or {})["metadata"]["resourceVersion"]
        reply = agents[qnodes[3]].reallocate(ns, name)
        assert reply["decision"] == "migrate" and reply["target"] == target, reply

        # At every tick of the move (drive also asserts one live pod at most): the Workload
        # is the same one, still Admitted, never evicted or requeued, and the quota is
        # charged exactly once; no pod of the Job is gated.
        seen: list[tuple[str, str, float]] = []

        def kueue_holds(pods: list[dict[str, Any]]) -> bool:
            w = workload()
            assert w is not None and w["metadata"]["uid"] == wl_uid
            conds = conditions(w)
            assert conds.get("Admitted") == "True" and conds.get("Evicted") != "True", conds
            assert not (w.get("status") or {}).get("requeueState")
            used = usage(cluster_queue(), flavor)
            assert used == pytest.approx(0.1), used
            gated = [p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith(
                "kq-") and p["spec"].get("schedulingGates")]
            assert not gated, gated
            seen.append((w["metadata"]["name"], conds["Admitted"], used))
            return job.starts > 1

        drive(api, ns, agents, [job], kueue_holds)
        assert seen
        # Ticks sample; the watch replay misses nothing: every version the Workload went
        # through during the move (none, if Kueue never touched it) was the same object,
        # Admitted, never evicted or requeued, and no other Workload appeared.
        for change in api.changes(workloads, before):
            w = change["object"]
            assert change["type"] == "MODIFIED" and w["metadata"]["uid"] == wl_uid, change
            conds = conditions(w)
            assert conds.get("Admitted") == "True" and conds.get("Evicted") != "True", conds
            assert not (w.get("status") or {}).get("requeueState"), w["status"]
        assert job.node == target and job.pod != name
        assert_resumed_exactly(job)  # and it goes on training on the target
        rep = api.pod(ns, job.pod)
        assert rep is not None and rep["metadata"]["ownerReferences"][0]["uid"] == job_uid
        assert flavor_labels.items() <= rep["spec"]["nodeSelector"].items()
        saved = job.saved()
        jobobj = api.job(ns, "kq")
        assert jobobj is not None and saved is not None
        assert jobobj["metadata"]["annotations"]["specon.io/migrated"] == saved["request"]
        assert not jobobj["spec"]["suspend"]
        assert (jobobj.get("status") or {}).get("failed", 0) == 0  # the eviction was ignored
        wait_for("MigrationCompleted", lambda: "MigrationCompleted" in api.events(ns))
        # on the chosen node, not "elsewhere" after a lifted reservation
        metrics = httpx.get(f"{manager.url}/metrics").text
        assert 'specon_manager_migrations_total{result="completed"} 1.0' in metrics
        w = workload()
        assert w is not None and w["metadata"]["name"] == wl_name
        assert next(c["lastTransitionTime"] for c in w["status"]["conditions"]
                    if c["type"] == "Admitted") == admitted_at  # never re-admitted
        after = cluster_queue()
        assert usage(after, flavor) == pytest.approx(0.1)
        assert (after or {})["status"]["admittedWorkloads"] == 1

        # The job finishes on the target: the Job completes, Kueue finishes the Workload and
        # gives the quota back.
        before = job.step
        job.run_steps(5)
        assert job.step == before + 5
        plane.complete_pod(ns, job.pod)
        wait_for("the Job complete", lambda: conditions(api.job(ns, "kq")).get(
            "Complete") == "True")
        wait_for("the Workload finished", lambda: conditions(workload()).get(
            "Finished") == "True")
        wait_for("the quota released", lambda: usage(cluster_queue(), flavor) == 0.0 and (
            cluster_queue() or {})["status"]["admittedWorkloads"] == 0)
    except BaseException:
        print(f"--- kueue (last lines) ---\n{kueue.tail(80)}")
        raise
    finally:
        plane.kubectl("delete", "-n", ns, "job", "kq", "--ignore-not-found", "--wait=false",
                      check=False)
        plane.kubectl("delete", "clusterqueue", cq, "--ignore-not-found", "--wait=false",
                      check=False)
        plane.kubectl("delete", "resourceflavor", flavor, "--ignore-not-found",
                      "--wait=false", check=False)
        for node in labelled:
            plane.kubectl("label", "node", node, f"{POOL_LABEL}-", check=False)


def test_kueue_taking_the_quota_back_mid_migration_ends_it_and_the_job_resumes_when_readmitted(
    plane: Plane, api: Api, qnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, kueue: Kueue, manager: ManagerProcess, tmp_path: Path,
) -> None:
    """Kueue suspends an admitted Job when it preempts or deactivates its Workload. If that
    happens after SpeCon evicted the pod and before the Job's next pod exists, no pod comes
    until Kueue admits the Job again, maybe hours later. The migration ends there (it held the
    target's reservation and both nodes' migration slots), Kueue releases the quota once the
    evicted pod is gone, and when the Workload is admitted again the job resumes from the
    checkpoint it saved, one pod at a time throughout."""
    ns = plane_namespace
    flavor, cq, lq, objs = queues(f"{tag}-susp", ns, {FLAVOR_LABEL: tag})
    try:
        for obj in objs:
            apply(plane, ns, obj)
        manager.start()
        agents = agents_for(manager.url, tokens)
        set_layout(plane, agents, qnodes, ns, [["PC"] * 4, ["PC"] * 4, ["PC"] * 4, []])
        beat_all(agents, answered_within=SETUP_BEAT_S)
        apply(plane, ns, kueue_job("ks", tag, lq))
        first = wait_for("the Job's pod running", lambda: [
            p for p in live(api.pods(ns), "ks-") if p["status"].get("phase") == "Running"])[0]
        assert first["spec"]["nodeName"] == qnodes[3]
        name, uid = first["metadata"]["name"], first["metadata"]["uid"]
        workloads = f"{KUEUE}/namespaces/{ns}/workloads"

        def workload() -> dict[str, Any]:
            items = (api.get(workloads) or {}).get("items") or []
            assert len(items) == 1, [w["metadata"]["name"] for w in items]
            out: dict[str, Any] = items[0]
            return out

        def cluster_queue() -> dict[str, Any] | None:
            return api.get(f"{KUEUE}/clusterqueues/{cq}")

        wait_for("the quota charged", lambda: usage(cluster_queue(), flavor) == pytest.approx(
            0.1))
        # The evicted pod stays terminating until the test lets it go (as a slow kubelet).
        plane.kubectl("annotate", "-n", ns, f"pod/{name}", "specon.test/kubelet-gone=true")
        crowded_source(plane, qnodes, ns, agents)
        job = JobStandIn(tmp_path / "ckpt-ks", "ks-")
        start_job(api, ns, agents, job, name)
        job.run_steps(3)
        beat_all(agents)
        reply = agents[qnodes[3]].reallocate(ns, name)
        assert reply["decision"] == "migrate" and reply["target"] == qnodes[1], reply
        drive(api, ns, agents, [job], lambda pods: any(
            p["metadata"]["uid"] == uid and p["metadata"].get("deletionTimestamp")
            for p in pods))
        assert not job.running and job.stopped_at is not None  # saved on SIGTERM, exited

        # Kueue takes the quota back (a deactivation here; a preemption does the same).
        wl = workload()["metadata"]["name"]
        plane.kubectl("patch", "-n", ns, f"workload.kueue.x-k8s.io/{wl}", "--type=merge",
                      "-p", '{"spec":{"active":false}}')
        wait_for("the Job suspended", lambda: (api.job(ns, "ks") or {})["spec"]["suspend"])
        plane.kubectl("annotate", "-n", ns, f"pod/{name}", "specon.test/kubelet-gone-")

        def interrupted(_: list[dict[str, Any]]) -> bool:
            return "MigrationInterrupted" in api.events(ns)

        drive(api, ns, agents, [job], interrupted)
        metrics = httpx.get(f"{manager.url}/metrics").text
        assert 'specon_manager_migrations_total{result="suspended"} 1.0' in metrics
        assert "specon_manager_migrations_in_flight 0.0" in metrics
        jobobj = api.job(ns, "ks")
        assert jobobj is not None
        assert not (jobobj["metadata"].get("labels") or {}).get("specon.io/migrating")
        # Kueue's accounting: nothing charged while the Workload waits to be admitted again.
        wait_for("the quota released", lambda: usage(cluster_queue(), flavor) == 0.0 and (
            conditions(workload()).get("Admitted") != "True"))
        assert [p["metadata"]["name"] for p in live(api.pods(ns), "ks-")] == []

        # Admitted again: the Job's next pod is placed by SpeCon's scheduler (no reservation
        # now) and the job resumes from the checkpoint it saved when it was evicted.
        plane.kubectl("patch", "-n", ns, f"workload.kueue.x-k8s.io/{wl}", "--type=merge",
                      "-p", '{"spec":{"active":true}}')
        drive(api, ns, agents, [job], lambda _: job.starts > 1)
        assert_resumed_exactly(job)
        rep = api.pod(ns, job.pod)
        assert rep is not None and rep["spec"]["schedulerName"] == SCHED
        assert conditions(workload()).get("Admitted") == "True"
        wait_for("the quota charged again", lambda: usage(cluster_queue(), flavor) == (
            pytest.approx(0.1)))
        plane.complete_pod(ns, job.pod)
        wait_for("the Workload finished", lambda: conditions(workload()).get(
            "Finished") == "True")
        wait_for("the quota released", lambda: usage(cluster_queue(), flavor) == 0.0)
    except BaseException:
        print(f"--- kueue (last lines) ---\n{kueue.tail(80)}")
        raise
    finally:
        plane.kubectl("annotate", "-n", ns, "pods", "--all", "specon.test/kubelet-gone-",
                      check=False)
        plane.kubectl("delete", "-n", ns, "job", "ks", "--ignore-not-found", "--wait=false",
                      check=False)
        plane.kubectl("delete", "clusterqueue", cq, "--ignore-not-found", "--wait=false",
                      check=False)
        plane.kubectl("delete", "resourceflavor", flavor, "--ignore-not-found",
                      "--wait=false", check=False)
