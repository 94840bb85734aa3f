"""The manager on the real control plane: the real kube-scheduler calls the extender, the
migration controller moves real pods (bare and Job-owned), survives being killed at each
phase, and the rebalancer fills an idle node. See planemanager.py for the stand-ins (agent and
training process: KWOK nodes run no containers)."""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from managerlib import serve
from planelib import Plane, free_port
from planemanager import (
    AgentStandIn,
    Api,
    JobStandIn,
    ManagerProcess,
    apply,
    assert_placed,
    placeholder_pods,
    running_on,
    scheduler_config,
    wait_for,
)
from planemanager import train_pod as plane_train_pod

from specon_manager.kube import Kube
from specon_manager.service import build
from specon_manager.settings import ManagerSettings

pytestmark = pytest.mark.plane

SCHED = "specon"
FIXTURES = Path(__file__).parent / "fixtures" / "extender"
#: Set to 1 to rewrite the recorded extender requests in FIXTURES from a live run.
RECORD = os.environ.get("SPECON_RECORD_FIXTURES") == "1"
TERMINAL = ("Succeeded", "Failed")


@pytest.fixture(scope="module")
def tag() -> str:
    return f"m{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def mnodes(plane: Plane, tag: str) -> list[str]:
    return plane.add_nodes(4, prefix=tag, labels={"specon-test": tag})


@pytest.fixture(scope="module")
def tokens(mnodes: list[str]) -> dict[str, str]:
    return {f"tok-{uuid.uuid4().hex}": n for n in mnodes}


@pytest.fixture(scope="module")
def ext_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def api(plane: Plane) -> Iterator[Api]:
    client = Api(plane)
    yield client
    client.close()


@pytest.fixture(scope="module")
def scheduler(plane: Plane, ext_port: int) -> Iterator[None]:
    plane.run_scheduler(SCHED, extenders=scheduler_config(ext_port, True))
    yield
    plane.stop_scheduler(SCHED)


def train_pod(name: str, tag: str, node: str | None = None) -> dict[str, Any]:
    return plane_train_pod(name, tag, SCHED, node)


def train_job(name: str, tag: str) -> dict[str, Any]:
    pod = train_pod("x", tag)
    pod["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 3, "podReplacementPolicy": "Failed",
                     "template": {"metadata": {"labels": pod["metadata"]["labels"]},
                                  "spec": pod["spec"]}}}


def owned_workload(kind: str, name: str, tag: str) -> dict[str, Any]:
    """A single-replica StatefulSet or Deployment of migratable training pods."""
    pod = train_pod("x", tag)
    labels = {**pod["metadata"]["labels"], "app": name}
    spec: dict[str, Any] = {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                            "template": {"metadata": {"labels": labels}, "spec": pod["spec"]}}
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def is_live(p: dict[str, Any]) -> bool:
    """Runs or may run: bound, not terminating, not ended."""
    return bool(p["spec"].get("nodeName")) and not p["metadata"].get("deletionTimestamp") and (
        p["status"].get("phase") not in TERMINAL)


def live(pods: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [p for p in pods if p["metadata"]["name"].startswith(prefix) and is_live(p)]


def agents_for(url: str, tokens: dict[str, str]) -> dict[str, AgentStandIn]:
    return {n: AgentStandIn(url, n, t) for t, n in tokens.items()}


WORKED = [["PC", "PC", "PC"], ["PC", "WC"], ["PC", "PC"], ["PC"] * 5 + ["CC"]]


def set_layout(plane: Plane, agents: dict[str, AgentStandIn], nodes: list[str], ns: str,
               layout: list[list[str]]) -> None:
    """Jobs per node that only weigh in the scores (jobs of the test's own pods are hosted):
    each is a real pod on its node, since the manager drops reported jobs that are not."""
    where = {f"virtual-{i}-{k}": node for i, node in enumerate(nodes)
             for k in range(len(layout[i]))}
    placeholder_pods(plane, ns, where)
    for i, node in enumerate(nodes):
        agents[node].set_jobs({f"virtual-{i}-{k}": c for k, c in enumerate(layout[i])}, ns)


def beat_all(agents: dict[str, AgentStandIn], answered_within: float = 0) -> None:
    """A heartbeat from every agent. One the manager does not answer (away, or slower than the
    stand-in's 5 s) is dropped, as an agent would drop it, unless ``answered_within`` (s) is
    given: then it is sent again until answered, and the test fails if it is not. A set-up
    beat must be answered: a node the manager has not heard of scores 0, and the pod the test
    expects there goes elsewhere (the likeliest cause of a CI failure where a PyTorchJob's pod
    landed on a node the extender scored low, with no extender error in the scheduler's log)."""
    for a in agents.values():
        if a.beat() is None and answered_within > 0:
            deadline = time.monotonic() + answered_within
            while a.beat() is None:
                assert time.monotonic() < deadline, (
                    f"the manager answered no heartbeat of {a.node} in {answered_within:.0f} s")
                time.sleep(0.5)


#: How long a set-up heartbeat may take to be answered (beat_all's answered_within).
SETUP_BEAT_S = 60.0


def start_job(api: Api, ns: str, agents: dict[str, AgentStandIn], job: JobStandIn, pod: str,
              category: str = "CC") -> None:
    """The job's process starts in its running pod; that node's agent follows it."""
    obj = api.pod(ns, pod)
    assert obj is not None
    job.start(obj)
    agents[job.node].host(job, ns, category)


def play_kubelet(job: JobStandIn, pods: list[dict[str, Any]], ns: str,
                 agents: dict[str, AgentStandIn]) -> None:
    """What a kubelet does to the job's process: SIGTERM when its pod is deleted; a start in
    the pod that replaces it, once that one runs."""
    mine = [p for p in pods if p["metadata"]["name"].startswith(job.prefix)]
    if job.running:
        cur = next((p for p in mine if p["metadata"]["uid"] == job.uid), None)
        if cur is None or cur["metadata"].get("deletionTimestamp") or (
                cur["status"].get("phase") in TERMINAL):
            job.sigterm()
            agents[job.node].drop(job.pod)
    if not job.running and job.starts > 0:
        for p in mine:
            if p["metadata"]["uid"] != job.uid and is_live(p) and (
                    p["status"].get("phase") == "Running"):
                job.start(p)
                agents[job.node].host(job, ns, "PC")  # a new container starts in PC
                break


def drive(api: Api, ns: str, agents: dict[str, AgentStandIn], jobs: list[JobStandIn],
          done: Callable[[list[dict[str, Any]]], Any], manager: ManagerProcess | None = None,
          timeout: float = 60) -> Any:
    """Kubelet, agents and training steps, tick by tick, until ``done(pods)``; asserts at every
    tick that no job ever has two live pods."""
    def tick() -> Any:
        if manager is not None and not manager.alive():
            return "manager-exited"
        pods = api.pods(ns)
        for job in jobs:
            play_kubelet(job, pods, ns, agents)
        beat_all(agents)
        for job in jobs:
            job.run_steps(1)
            both = [p["metadata"]["name"] for p in live(pods, job.prefix)]
            assert len(both) <= 1, f"two live pods of one job: {both}"
        return done(pods)

    return wait_for("the migration to end", tick, timeout=timeout, every=0.2)


def assert_resumed_exactly(job: JobStandIn) -> None:
    """The job was stopped after a verified checkpoint and resumed from it, losing nothing."""
    assert job.exit_code is None and job.starts == 2 and job.stopped_at is not None
    assert job.resumed is not None
    assert (job.resumed.step, job.resumed.state) == job.stopped_at
    kinds = [(e["event"], e.get("reason")) for e in job.events()]
    # the requested checkpoint came first, the eviction's SIGTERM save after it
    assert kinds.index(("checkpoint", "request")) < kinds.index(("stop", "sigterm"))
    assert kinds[-1][0] == "resume"
    before = job.step
    job.run_steps(2)
    assert job.step == before + 2  # and it goes on training


# -- placement -------------------------------------------------------------------------------------
class Recorder:
    """Records every extender call of the real kube-scheduler (real HTTP): request and reply."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.calls: list[tuple[str, dict[str, Any], Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] not in ("/filter", "/prioritize"):
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        body = b"".join(chunks)
        sent = False
        reply: list[bytes] = []

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def keep(msg: Any) -> None:
            if msg["type"] == "http.response.body":
                reply.append(msg.get("body", b""))
            await send(msg)

        await self.app(scope, replay, keep)
        self.calls.append((scope["path"], json.loads(body), json.loads(b"".join(reply))))

    def of(self, verb: str, pod: str) -> list[tuple[dict[str, Any], Any]]:
        return [(b, r) for v, b, r in self.calls
                if v == verb and b["Pod"]["metadata"]["name"] == pod]


def shape(obj: Any, depth: int = 2) -> Any:
    """The keys (and JSON types) of a document, ``depth`` levels down: what must not drift."""
    if isinstance(obj, dict) and depth > 0:
        return {k: shape(v, depth - 1) for k, v in obj.items()}
    if isinstance(obj, list) and obj and depth > 0:
        return [shape(obj[0], depth - 1)]
    return type(obj).__name__


def check_fixture(name: str, body: dict[str, Any]) -> None:
    """The live request has the shape of the recorded one (tests/manager/test_extender.py
    replays the recorded ones)."""
    path = FIXTURES / name
    if RECORD:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    stored = json.loads(path.read_text())
    assert shape(body) == shape(stored)


@pytest.mark.parametrize("node_cache", [True, False], ids=["nodeCacheCapable", "fullNodes"])
def test_new_training_pods_land_where_the_specon_score_prefers(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, node_cache: bool, tmp_path: Path,
) -> None:
    ns = plane_namespace
    port = free_port()
    (tmp_path / "tokens").write_text("".join(f"{t} {n}\n" for t, n in tokens.items()))
    sched, other = "specon-place", "other-place"
    # The research's placement scores (Algorithm 2's, the figures below); the shipped
    # policy's placement is test_manager_policy.py's
    settings = ManagerSettings(kubernetes=True, migration=False, heartbeat_interval_s=120,
                               kubeconfig=plane.kubeconfig, tokens_file=tmp_path / "tokens",
                               scheduler_name=sched, policy="paper")
    app, _ = build(settings, kube=Kube.from_kubeconfig(plane.kubeconfig))
    recorder = Recorder(app)
    # One kube-scheduler, two profiles, both calling the extender: ``sched`` is SpeCon's
    # scheduler name (an opt-in by itself); ``other`` stands for a default scheduler
    # configured with the extender, where only the training label opts a pod in.
    plane.run_scheduler(sched, extenders=scheduler_config(port, node_cache), config={
        "profiles": [{"schedulerName": sched}, {"schedulerName": other}]})
    try:
        with serve(recorder, port=port) as url:
            agents = agents_for(url, tokens)
            set_layout(plane, agents, mnodes, ns, WORKED)
            beat_all(agents, answered_within=SETUP_BEAT_S)
            pod = train_pod("p1", tag)  # opted in by the training label
            pod["spec"]["schedulerName"] = other
            apply(plane, ns, pod)
            node = wait_for("p1 running", lambda: running_on(api, ns, "p1"))
            assert node == mnodes[1]  # scores 6, 3.5, 4, 11
            # p1 is now a progressing job on node 1 (5.5): node 2 (4) is preferred
            agents[mnodes[1]].jobs["p1"] = {"namespace": ns, "pod": "p1", "category": "PC"}
            beat_all(agents)
            # a batch Job opted in by the scheduler name alone (no training label)
            job = train_job("j1", tag)
            job["spec"]["template"]["spec"]["schedulerName"] = sched
            job["spec"]["template"]["metadata"]["labels"] = {}
            apply(plane, ns, job)
            jp = wait_for("the Job's pod running", lambda: [
                p for p in api.pods(ns) if p["metadata"]["name"].startswith("j1-")
                and p["status"].get("phase") == "Running"])
            assert jp[0]["spec"]["nodeName"] == mnodes[2]
            # a pod that is not a training job is not steered
            plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                     "spec": {"schedulerName": other, "nodeSelector": {"specon-test": tag},
                              "containers": [{"name": "c", "image": "nginx"}]}}
            apply(plane, ns, plain)
            wait_for("web running", lambda: running_on(api, ns, "web"))
    finally:
        plane.stop_scheduler(sched)
    form = "nodeNames" if node_cache else "fullNodes"
    for verb in ("/filter", "/prioritize"):
        calls = recorder.of(verb, "p1")
        assert calls, f"the scheduler never called {verb} for p1"
        body, reply = calls[0]
        if node_cache:
            assert sorted(body["NodeNames"]) == sorted(mnodes) and body.get("Nodes") is None
        else:
            assert sorted(n["metadata"]["name"] for n in body["Nodes"]["items"]) == sorted(
                mnodes)
            assert not body.get("NodeNames")
        if verb == "/filter":
            kept = reply["NodeNames"] if node_cache else [
                n["metadata"]["name"] for n in reply["Nodes"]["items"]]
            assert sorted(kept) == sorted(mnodes) and reply["FailedNodes"] == {}
        else:
            scores = {h["Host"]: h["Score"] for h in reply}
            assert max(scores, key=lambda n: scores[n]) == mnodes[1]
            assert scores[mnodes[3]] == min(scores.values())
        check_fixture(f"{verb[1:]}-{form}.json", body)
    for _, reply in recorder.of("/prioritize", "web"):
        assert {h["Score"] for h in reply} == {0}  # asked, and answered: no preference


# -- migration -------------------------------------------------------------------------------------
@pytest.fixture
def manager(plane: Plane, tokens: dict[str, str], ext_port: int, tmp_path: Path,
            scheduler: None) -> Iterator[ManagerProcess]:
    mp = ManagerProcess(plane, tmp_path, tokens, port=ext_port)
    yield mp
    mp.kill()


def crowded_source(plane: Plane, mnodes: list[str], ns: str,
                   agents: dict[str, AgentStandIn]) -> None:
    """The worked example; the converged job of a real pod on node 3 is hosted on top."""
    layout = [list(x) for x in WORKED]
    layout[3] = ["PC"] * 5
    set_layout(plane, agents, mnodes, ns, layout)


def converged_bare_job(plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str],
                       ns: str, manager: ManagerProcess, tmp_path: Path, pod: dict[str, Any],
                       ) -> tuple[dict[str, AgentStandIn], JobStandIn, dict[str, Any]]:
    """``pod``, a bare training pod pinned to node 3 (the worked example's crowded source): it
    runs, its job takes a few steps and converges, and node 3's agent asks to move it. Returns
    the agents, the job and the manager's reply."""
    name = pod["metadata"]["name"]
    apply(plane, ns, pod)
    wait_for(f"{name} running", lambda: running_on(api, ns, name))
    agents = agents_for(manager.url, tokens)
    crowded_source(plane, mnodes, ns, agents)
    job = JobStandIn(tmp_path / f"ckpt-{name}", name)
    start_job(api, ns, agents, job, name)
    job.run_steps(5)
    beat_all(agents)
    return agents, job, agents[mnodes[3]].reallocate(ns, name)


def migration_id(obj: dict[str, Any]) -> str:
    record = json.loads(obj["metadata"]["annotations"]["specon.io/migration"])
    mid: str = record["id"]
    return mid


def test_converged_bare_pod_is_migrated_to_the_chosen_node_and_resumes(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path,
) -> None:
    ns = plane_namespace
    manager.start()
    agents, job, reply = converged_bare_job(plane, api, mnodes, tokens, ns, manager, tmp_path,
                                            train_pod("train-a", tag, node=mnodes[3]))
    assert reply["decision"] == "migrate" and reply["target"] == mnodes[1], reply
    assert reply["migrated"] is True
    drive(api, ns, agents, [job], lambda _: job.starts > 1)
    assert job.node == mnodes[1] and job.pod != "train-a"
    assert api.pod(ns, "train-a") is None  # the original is gone
    assert_resumed_exactly(job)
    rep = api.pod(ns, job.pod)
    assert rep is not None
    saved = job.saved()
    assert saved is not None
    # the checkpoint answered this migration's request (its id is the request id)
    assert rep["metadata"]["annotations"]["specon.io/migrated"] == saved["request"]
    assert migration_id(rep) == saved["request"]
    wait_for("events", lambda: {"MigrationStarted", "CheckpointRequested", "CheckpointVerified",
                                "MigrationEvicted", "MigrationCompleted"} <= set(
        api.events(ns)))
    metrics = httpx.get(f"{manager.url}/metrics").text
    assert 'specon_manager_migrations_total{result="completed"} 1.0' in metrics
    # every job the agents reported is a pod on its node (the check is on by default)
    assert "specon_manager_heartbeat_jobs_ignored_total 0.0" in metrics
    # at most once: asking again is answered "stay"
    agents[mnodes[1]].host(job, ns, "CC")
    beat_all(agents)
    again = agents[mnodes[1]].reallocate(ns, job.pod)
    assert again["decision"] == "stay" and "already migrated" in again["reason"]


def test_a_source_that_stays_terminating_is_reported_and_the_job_waits_then_moves(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path,
) -> None:
    """Issue 15: after the eviction the replacement waits for the source pod to be gone (never
    two copies); a source that stays terminating (its node's kubelet gone: KWOK leaves a pod
    annotated specon.test/kubelet-gone terminating) was waited for in silence. Now it is
    reported once, with the way out, and the job moves as soon as the pod is gone (here the
    test deletes it as Kubernetes does once the dead node is deleted or declared out of
    service)."""
    ns = plane_namespace
    manager.start(source_stuck_after_s=1)
    held = train_pod("train-s", tag, node=mnodes[3])
    held["metadata"]["annotations"] = {"specon.test/kubelet-gone": "true"}
    agents, job, reply = converged_bare_job(plane, api, mnodes, tokens, ns, manager, tmp_path,
                                            held)
    assert reply["decision"] == "migrate", reply
    try:
        drive(api, ns, agents, [job], lambda _: "MigrationSourceStuck" in api.events(ns))
        source = api.pod(ns, "train-s")
        assert source is not None and source["metadata"].get("deletionTimestamp")
        assert job.starts == 1  # the replacement has not run: the source still exists
        text = " ".join(e.get("note", "") for e in api.event_items(ns)
                        if e["reason"] == "MigrationSourceStuck")
        assert "node.kubernetes.io/out-of-service" in text and f"node {mnodes[3]} is Ready" in text
        assert "specon_manager_migration_source_stuck_total 1.0" in httpx.get(
            f"{manager.url}/metrics").text
    finally:
        # What PodGC does for a pod on a deleted or out-of-service node: a forced deletion.
        plane.kubectl("delete", "-n", ns, "pod", "train-s", "--force", "--grace-period=0",
                      check=False)
    drive(api, ns, agents, [job], lambda _: job.starts > 1)
    # The replacement carries the source's annotations: let KWOK delete it normally again, or
    # it would stay terminating with its namespace (and hold the later rebalancing test back).
    plane.kubectl("annotate", "-n", ns, "pod", job.pod, "specon.test/kubelet-gone-")
    assert job.node == mnodes[1]
    assert_resumed_exactly(job)
    assert api.events(ns).count("MigrationSourceStuck") == 1


def test_no_verified_checkpoint_in_time_cancels_and_the_job_stays(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess,
) -> None:
    ns = plane_namespace
    manager.start(checkpoint_timeout_s=2)
    apply(plane, ns, train_pod("train-b", tag, node=mnodes[3]))
    wait_for("train-b running", lambda: running_on(api, ns, "train-b"))
    agents = agents_for(manager.url, tokens)
    crowded_source(plane, mnodes, ns, agents)
    agents[mnodes[3]].jobs["train-b"] = {"namespace": ns, "pod": "train-b", "category": "CC"}
    beat_all(agents)
    assert agents[mnodes[3]].reallocate(ns, "train-b")["decision"] == "migrate"
    # the job never answers (it does not checkpoint): cancelled, still where it was
    wait_for("cancelled", lambda: (beat_all(agents), "MigrationCancelled" in api.events(
        ns))[1], timeout=30)
    assert running_on(api, ns, "train-b") == mnodes[3]
    assert [p["metadata"]["name"] for p in live(api.pods(ns), "train-b")] == ["train-b"]
    pod = api.pod(ns, "train-b")
    assert pod is not None
    assert pod["metadata"]["annotations"]["specon.io/migrated"] == "cancelled"
    assert "specon.io/migration" not in pod["metadata"]["annotations"]
    assert agents[mnodes[3]].reallocate(ns, "train-b")["decision"] == "stay"


def test_pods_that_did_not_opt_in_or_cannot_be_recreated_are_never_moved(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess,
) -> None:
    ns = plane_namespace
    manager.start()
    plain = train_pod("no-optin", tag, node=mnodes[3])
    del plain["metadata"]["labels"]["specon.io/migratable"]
    apply(plane, ns, plain)
    job = train_job("legacy", tag)
    del job["spec"]["podReplacementPolicy"]
    job["spec"]["template"]["spec"]["nodeName"] = mnodes[3]
    apply(plane, ns, job)
    # A Job the eviction would fail: no retry left, and no rule ignoring disruptions.
    fragile = train_job("fragile", tag)
    fragile["spec"]["backoffLimit"] = 0
    fragile["spec"]["template"]["spec"]["nodeName"] = mnodes[3]
    apply(plane, ns, fragile)

    def job_pod(prefix: str) -> str | None:
        for p in api.pods(ns):
            if p["metadata"]["name"].startswith(prefix + "-") and (
                    p["status"].get("phase") == "Running"):
                name: str = p["metadata"]["name"]
                return name
        return None

    # A Deployment's pod, while the manager is not told the extender is non-ignorable.
    deploy = owned_workload("Deployment", "dep", tag)
    deploy["spec"]["template"]["spec"]["nodeName"] = mnodes[3]
    apply(plane, ns, deploy)

    wait_for("pods running", lambda: running_on(api, ns, "no-optin") and job_pod("legacy")
             and job_pod("fragile") and job_pod("dep"))
    legacy, fragile_pod, dep = job_pod("legacy"), job_pod("fragile"), job_pod("dep")
    assert legacy is not None and fragile_pod is not None and dep is not None
    agents = agents_for(manager.url, tokens)
    crowded_source(plane, mnodes, ns, agents)
    for pod in ("no-optin", legacy, fragile_pod, dep):
        agents[mnodes[3]].jobs[pod] = {"namespace": ns, "pod": pod, "category": "CC"}
    beat_all(agents)
    # Never movable: judged best where they are and marked, so that the agent stops asking
    # (the simulator's rule, specon.core.scoring.decide_reallocation).
    r1 = agents[mnodes[3]].reallocate(ns, "no-optin")
    assert r1["decision"] == "stay" and r1["migrated"] is True and "opt in" in r1["reason"]
    r2 = agents[mnodes[3]].reallocate(ns, legacy)
    assert r2["decision"] == "stay" and r2["migrated"] is True
    assert "podReplacementPolicy" in r2["reason"]
    r3 = agents[mnodes[3]].reallocate(ns, fragile_pod)
    assert r3["decision"] == "stay" and r3["migrated"] is True, r3
    assert "would fail its Job" in r3["reason"] and "backoffLimit 0" in r3["reason"]
    r4 = agents[mnodes[3]].reallocate(ns, dep)
    assert r4["decision"] == "stay" and r4["migrated"] is True, r4
    assert "migrate_replicaset_pods" in r4["reason"]
    for pod in ("no-optin", legacy, fragile_pod, dep):
        assert running_on(api, ns, pod) == mnodes[3]
    assert "MigrationStarted" not in api.events(ns)


def test_job_owned_pod_is_migrated_and_its_job_controller_recreates_it_on_the_target(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path,
) -> None:
    ns = plane_namespace
    manager.start()
    agents = agents_for(manager.url, tokens)
    # first make node 3 the best place, so the Job's pod lands there
    set_layout(plane, agents, mnodes, ns, [["PC"] * 4, ["PC"] * 4, ["PC"] * 4, []])
    beat_all(agents, answered_within=SETUP_BEAT_S)
    apply(plane, ns, train_job("tj", tag))
    first = wait_for("the Job's pod running", lambda: [
        p for p in live(api.pods(ns), "tj-") if p["status"].get("phase") == "Running"])[0]
    assert_placed(plane, first, mnodes[3], SCHED, manager.url)
    name = first["metadata"]["name"]
    crowded_source(plane, mnodes, ns, agents)
    job = JobStandIn(tmp_path / "ckpt-tj", "tj-")
    start_job(api, ns, agents, job, name)
    job.run_steps(3)
    beat_all(agents)
    reply = agents[mnodes[3]].reallocate(ns, name)
    assert reply["decision"] == "migrate" and reply["target"] == mnodes[1], reply
    drive(api, ns, agents, [job], lambda _: job.starts > 1)
    assert job.node == mnodes[1] and job.pod != name
    assert_resumed_exactly(job)
    rep = api.pod(ns, job.pod)
    assert rep is not None and rep["metadata"]["ownerReferences"][0]["kind"] == "Job"
    jobobj = api.job(ns, "tj")
    saved = job.saved()
    assert jobobj is not None and saved is not None
    assert jobobj["metadata"]["annotations"]["specon.io/migrated"] == saved["request"]
    wait_for("MigrationCompleted", lambda: "MigrationCompleted" in api.events(ns))


@pytest.mark.parametrize("kind", ["StatefulSet", "Deployment"])
def test_a_statefulset_or_deployment_pod_moves_with_never_two_copies(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path, kind: str,
) -> None:
    """The owner recreates the evicted pod; the manager only steers it to the target. While
    the evicted pod is still terminating (held here: KWOK leaves pods annotated
    ``specon.test/kubelet-gone`` terminating, as a slow kubelet would), no second copy runs:
    a StatefulSet makes none, and a ReplicaSet's new pod is held unplaced by the extender."""
    ns = plane_namespace
    manager.start(migrate_replicaset_pods=True)
    agents = agents_for(manager.url, tokens)
    set_layout(plane, agents, mnodes, ns, [["PC"] * 4, ["PC"] * 4, ["PC"] * 4, []])
    beat_all(agents, answered_within=SETUP_BEAT_S)
    name = "ts" if kind == "StatefulSet" else "td"
    apply(plane, ns, owned_workload(kind, name, tag))
    first = wait_for(f"the {kind}'s pod running", lambda: [
        p for p in live(api.pods(ns), name + "-") if p["status"].get("phase") == "Running"])[0]
    assert_placed(plane, first, mnodes[3], SCHED, manager.url)
    pod, uid = first["metadata"]["name"], first["metadata"]["uid"]
    plane.kubectl("annotate", "-n", ns, f"pod/{pod}", "specon.test/kubelet-gone=true")
    crowded_source(plane, mnodes, ns, agents)
    job = JobStandIn(tmp_path / f"ckpt-{name}", name + "-")
    start_job(api, ns, agents, job, pod)
    job.run_steps(3)
    beat_all(agents)
    reply = agents[mnodes[3]].reallocate(ns, pod)
    assert reply["decision"] == "migrate" and reply["target"] == mnodes[1], reply

    def others(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [p for p in pods if p["metadata"]["name"].startswith(name + "-")
                and p["metadata"]["uid"] != uid]

    drive(api, ns, agents, [job], lambda pods: any(
        p["metadata"]["uid"] == uid and p["metadata"].get("deletionTimestamp") for p in pods))
    held_until = time.monotonic() + 4
    seen: list[str] = []

    def held(pods: list[dict[str, Any]]) -> bool:
        bound = [p["metadata"]["name"] for p in others(pods) if p["spec"].get("nodeName")]
        assert not bound, f"a second copy was placed while the first terminates: {bound}"
        seen.extend(p["metadata"]["name"] for p in others(pods))
        return time.monotonic() > held_until

    drive(api, ns, agents, [job], held)
    # the StatefulSet waits for the name to be free; the ReplicaSet made its pod at once
    assert bool(seen) == (kind == "Deployment"), seen
    plane.kubectl("annotate", "-n", ns, f"pod/{pod}", "specon.test/kubelet-gone-")
    drive(api, ns, agents, [job], lambda _: job.starts > 1)
    assert job.node == mnodes[1]
    assert (job.pod == pod) == (kind == "StatefulSet")  # a StatefulSet keeps the pod's name
    assert_resumed_exactly(job)
    ref = first["metadata"]["ownerReferences"][0]
    resource = {"StatefulSet": "statefulsets", "ReplicaSet": "replicasets"}[ref["kind"]]
    owner = api.get(f"/apis/apps/v1/namespaces/{ns}/{resource}/{ref['name']}")
    saved = job.saved()
    assert owner is not None and saved is not None
    assert owner["metadata"]["annotations"]["specon.io/migrated"] == saved["request"]
    wait_for("MigrationCompleted", lambda: "MigrationCompleted" in api.events(ns))


# Each phase's record is written, then the manager exits at once (status 137, as SIGKILL).
PHASES = ["reserved", "checkpointing", "evicting", "evicting-recorded", "placing", "ungated"]
# A Job's migration has no replacement of the manager's own (no "ungated"); its "evicting"
# record is the bare pod's (on the source pod).
JOB_PHASES = ["reserved", "checkpointing", "evicting-recorded", "placing"]


def kill_mid_migration(plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str],
                       ns: str, tag: str, manager: ManagerProcess, tmp_path: Path, phase: str,
                       kind: str) -> None:
    manager.start(fault_exit_after_phase=phase)
    agents = agents_for(manager.url, tokens)
    if kind == "pod":
        prefix = "train-k"
        apply(plane, ns, train_pod(prefix, tag, node=mnodes[3]))
        name = wait_for("train-k running", lambda: running_on(api, ns, prefix) and prefix)
    else:
        prefix = "tk-"
        # node 3 the best place, so the Job's pod lands there
        set_layout(plane, agents, mnodes, ns, [["PC"] * 4, ["PC"] * 4, ["PC"] * 4, []])
        beat_all(agents, answered_within=SETUP_BEAT_S)
        apply(plane, ns, train_job("tk", tag))
        name = wait_for("the Job's pod running", lambda: [
            p["metadata"]["name"] for p in live(api.pods(ns), prefix)
            if p["status"].get("phase") == "Running"])[0]
        assert running_on(api, ns, name) == mnodes[3]
    crowded_source(plane, mnodes, ns, agents)
    job = JobStandIn(tmp_path / "ckpt-k", prefix)
    start_job(api, ns, agents, job, name)
    job.run_steps(2)
    beat_all(agents)
    # the manager may die while answering
    with contextlib.suppress(httpx.HTTPError, AssertionError):
        agents[mnodes[3]].reallocate(ns, name)
    assert drive(api, ns, agents, [job], lambda _: False, manager=manager) == "manager-exited"
    assert manager.wait_exit() == 137
    assert len(live(api.pods(ns), prefix)) <= 1
    manager.start()  # no fault this time: it resumes or rolls back from the records

    def settled(_: Any) -> str | None:
        if job.starts > 1:
            return "moved"
        if "MigrationCancelled" in api.events(ns):
            return "stayed"
        return None

    outcome = drive(api, ns, agents, [job], settled, manager=manager)
    alive = live(api.pods(ns), prefix)
    assert len(alive) == 1, alive
    if outcome == "moved":
        assert alive[0]["metadata"]["uid"] == job.uid
        if kind == "job" and phase == "placing":
            # The Job controller recreated the pod while the manager was away, and the
            # scheduler placed it without the extender (ignorable: true): moved, maybe
            # elsewhere (docs/manager.md).
            assert job.node in mnodes
        else:
            assert job.node == mnodes[1]
        assert_resumed_exactly(job)
        wait_for("MigrationCompleted", lambda: "MigrationCompleted" in api.events(ns))
    else:
        assert job.starts == 1 and job.running
        assert alive[0]["metadata"]["name"] == name
        assert alive[0]["spec"]["nodeName"] == mnodes[3]
    # no leftovers: no gated pod, no migration still recorded as in flight
    pods = api.pods(ns)
    assert [p["metadata"]["name"] for p in pods if p["spec"].get("schedulingGates")] == []
    migrating = [p["metadata"]["name"] for p in pods
                 if p["metadata"].get("labels", {}).get("specon.io/migrating")]
    if kind == "job":
        jobobj = api.job(ns, "tk")
        assert jobobj is not None
        if jobobj["metadata"].get("labels", {}).get("specon.io/migrating"):
            migrating.append("job/tk")
    assert migrating == []


@pytest.mark.parametrize("phase", PHASES)
def test_killing_the_manager_at_each_phase_never_loses_or_duplicates_the_job(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path, phase: str,
) -> None:
    kill_mid_migration(plane, api, mnodes, tokens, plane_namespace, tag, manager, tmp_path,
                       phase, "pod")


@pytest.mark.parametrize("phase", JOB_PHASES)
def test_killing_the_manager_mid_migration_of_a_job_owned_pod(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path, phase: str,
) -> None:
    kill_mid_migration(plane, api, mnodes, tokens, plane_namespace, tag, manager, tmp_path,
                       phase, "job")


def two_converged_on_the_first_node(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], ns: str, tag: str,
    manager: ManagerProcess, tmp_path: Path,
) -> tuple[Any, list[JobStandIn]]:
    """Two training pods (ra, rb) running on node 0, both reported converged, node 3 idle: a
    layout above the balance factor 1 where rebalancing moves one job. Returns the agents and
    the jobs' stand-ins, started."""
    for name in ("ra", "rb"):
        apply(plane, ns, train_pod(name, tag, node=mnodes[0]))
    for name in ("ra", "rb"):
        wait_for(f"{name} running", lambda n=name: running_on(api, ns, n))
    agents = agents_for(manager.url, tokens)
    set_layout(plane, agents, mnodes, ns, [[], ["CC"], ["CC"], []])
    jobs = [JobStandIn(tmp_path / f"ckpt-{n}", n) for n in ("ra", "rb")]
    for j in jobs:
        start_job(api, ns, agents, j, j.prefix)
    return agents, jobs


@pytest.mark.parametrize("kill", [False, True], ids=["", "killed-once-lifted"])
def test_a_replacement_the_target_cannot_take_is_placed_elsewhere_never_lost(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path, kill: bool,
) -> None:
    """``killed-once-lifted``: the manager exits (137) right after recording the lifted
    reservation (the unpinned copy made, the pinned replacement not yet removed), issue 15's
    uncovered crash; the restarted one finishes from the records."""
    ns = plane_namespace
    manager.start(placement_timeout_s=2, **({"fault_exit_after_phase": "lifted"} if kill else {}))
    apply(plane, ns, train_pod("train-c", tag, node=mnodes[3]))
    wait_for("train-c running", lambda: running_on(api, ns, "train-c"))
    agents = agents_for(manager.url, tokens)
    crowded_source(plane, mnodes, ns, agents)
    job = JobStandIn(tmp_path / "ckpt-c", "train-c")
    start_job(api, ns, agents, job, "train-c")
    beat_all(agents)
    reply = agents[mnodes[3]].reallocate(ns, "train-c")
    assert reply["decision"] == "migrate" and reply["target"] == mnodes[1], reply
    # the chosen target stops taking this pod before the replacement is placed (nothing moves
    # until the next heartbeat carries the checkpoint request). A taint the pod does not
    # tolerate: the manager re-checks that the target exists, is Ready, uncordoned and fits
    # the pod before it evicts (a cordon cancels the move then), but taints are the
    # scheduler's to judge.
    taint = "specon.test/full=true:NoSchedule"
    plane.kubectl("taint", "node", mnodes[1], taint)
    try:
        if kill:
            assert drive(api, ns, agents, [job], lambda _: False,
                         manager=manager) == "manager-exited"
            assert manager.wait_exit() == 137
            assert len(live(api.pods(ns), "train-c")) <= 1
            manager.start(placement_timeout_s=2)
            agents = agents_for(manager.url, tokens)
            crowded_source(plane, mnodes, ns, agents)
        drive(api, ns, agents, [job], lambda _: job.starts > 1)
    finally:
        plane.kubectl("taint", "node", mnodes[1], taint + "-")
    assert job.node not in (mnodes[1], mnodes[3])
    assert_resumed_exactly(job)
    wait_for("MigrationCompleted", lambda: "MigrationCompleted" in api.events(ns))
    # (the killed manager died between the record and its event: the event is lost, not the job)
    assert ("MigrationReservationLifted" in api.events(ns)) != kill
    pods = api.pods(ns)
    assert [p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith(
        "train-c")] == [job.pod]  # the pinned replacement that never ran is gone
    metrics = httpx.get(f"{manager.url}/metrics").text
    assert 'specon_manager_migrations_total{result="elsewhere"} 1.0' in metrics


def test_rebalancing_moves_a_converged_job_onto_the_idle_node(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, manager: ManagerProcess, tmp_path: Path,
) -> None:
    ns = plane_namespace
    manager.start(rebalance=True, rebalance_period_s=0.5)
    agents, jobs = two_converged_on_the_first_node(plane, api, mnodes, tokens, ns, tag,
                                                   manager, tmp_path)

    moved = drive(api, ns, agents, jobs, lambda _: [j for j in jobs if j.starts > 1])
    assert len(moved) == 1 and moved[0].node == mnodes[3]
    assert_resumed_exactly(moved[0])
    stayed = next(j for j in jobs if j is not moved[0])
    assert stayed.starts == 1 and stayed.running and stayed.node == mnodes[0]
    rep = api.pod(ns, moved[0].pod)
    assert rep is not None and rep["metadata"]["annotations"].get("specon.io/rebalanced")
    assert len(live(api.pods(ns), "r")) == 2
    metrics = httpx.get(f"{manager.url}/metrics").text
    moves = [ln for ln in metrics.splitlines()
             if ln.startswith("specon_manager_rebalance_moves_total")]
    assert 'specon_manager_rebalance_moves_total{outcome="started"} 1.0' in moves, (
        moves, manager.tail(40))


def test_two_replicas_elect_one_leader_and_the_standby_finishes_its_migration(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, scheduler: None, tmp_path: Path,
) -> None:
    ns = plane_namespace
    lease = dict(leader_election=True, lease_namespace=ns, lease_duration_s=2,
                 renew_period_s=0.5)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = ManagerProcess(plane, tmp_path / "a", tokens, identity="replica-a", **lease)
    b = ManagerProcess(plane, tmp_path / "b", tokens, identity="replica-b", **lease)
    try:
        a.start(fault_exit_after_phase="checkpointing")
        b.start(wait="serving")

        def holder() -> dict[str, Any]:
            lease = api.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/"
                            "specon-manager")
            assert lease is not None
            spec: dict[str, Any] = lease["spec"]
            return spec

        assert holder()["holderIdentity"] == "replica-a"
        assert not b.answers("/readyz")  # the standby is not ready: no traffic reaches it
        apply(plane, ns, train_pod("train-h", tag, node=mnodes[3]))
        wait_for("train-h running", lambda: running_on(api, ns, "train-h"))
        agents = agents_for(b.url, tokens)
        crowded_source(plane, mnodes, ns, agents)
        with pytest.raises(AssertionError, match=r"503.*standby"):
            agents[mnodes[3]].beat()  # the standby serves no heartbeat (nor extender call)
        refused = agents[mnodes[3]].reallocate(ns, "train-h")
        assert refused["decision"] == "refused" and "not the leader" in refused["reason"]
        agents = agents_for(a.url, tokens)
        crowded_source(plane, mnodes, ns, agents)
        job = JobStandIn(tmp_path / "ckpt-h", "train-h")
        start_job(api, ns, agents, job, "train-h")
        beat_all(agents)
        with contextlib.suppress(httpx.HTTPError, AssertionError):
            agents[mnodes[3]].reallocate(ns, "train-h")  # a dies once the request is recorded
        assert a.wait_exit(30) == 137
        # the standby takes the Lease once it has not been renewed for its duration
        wait_for("the standby ready", lambda: b.answers("/readyz"), timeout=60)
        assert holder()["holderIdentity"] == "replica-b" and holder()["leaseTransitions"] >= 1
        agents = agents_for(b.url, tokens)
        crowded_source(plane, mnodes, ns, agents)
        agents[mnodes[3]].host(job, ns, "CC")
        drive(api, ns, agents, [job], lambda _: job.starts > 1, manager=b)
        assert job.node == mnodes[1]
        assert_resumed_exactly(job)
        assert "resumed from its record in phase checkpointing" in b.log.read_text()
    finally:
        a.kill()
        b.kill()


def test_a_job_outside_the_managers_training_namespaces_is_never_moved(
    plane: Plane, api: Api, mnodes: list[str], tokens: dict[str, str], plane_namespace: str,
    tag: str, ext_port: int, scheduler: None, tmp_path: Path,
) -> None:
    """The manager as the chart binds it: reads everywhere, pod writes only in its training
    namespaces (another one here). The API server refuses the migration's first record, the
    request is answered "refused", and the pod is left as it was."""
    ns = plane_namespace
    allowed = f"t-{uuid.uuid4().hex[:10]}"
    plane.kubectl("create", "namespace", allowed)
    writes = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "patch", "delete"]},
              {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
              {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
              {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]}]
    reads = [{"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list"]},
             {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list"]},
             {"apiGroups": ["apps"], "resources": ["statefulsets", "replicasets"],
              "verbs": ["get", "list"]}]
    kubeconfig = plane.service_account_kubeconfig(allowed, "manager", rules=writes,
                                                  cluster_rules=reads)
    mp = ManagerProcess(plane, tmp_path, tokens, port=ext_port, kubeconfig=kubeconfig)
    try:
        mp.start()
        apply(plane, ns, train_pod("outside", tag, node=mnodes[3]))
        wait_for("outside running", lambda: running_on(api, ns, "outside"))
        agents = agents_for(mp.url, tokens)
        crowded_source(plane, mnodes, ns, agents)
        agents[mnodes[3]].jobs["outside"] = {"namespace": ns, "pod": "outside",
                                             "category": "CC"}
        beat_all(agents)
        reply = agents[mnodes[3]].reallocate(ns, "outside")
        assert reply["decision"] == "refused" and "403" in reply["reason"], reply
        pod = api.pod(ns, "outside")
        assert pod is not None and pod["spec"]["nodeName"] == mnodes[3]
        assert "specon.io/migration" not in (pod["metadata"].get("annotations") or {})
        metrics = httpx.get(f"{mp.url}/metrics").text
        assert 'specon_manager_reallocation_requests_total{decision="refused"} 1.0' in metrics
    finally:
        mp.kill()
        plane.kubectl("delete", "namespace", allowed, "--wait=false", check=False)
        plane.kubectl("delete", "clusterrole,clusterrolebinding", f"{allowed}-manager",
                      check=False)
