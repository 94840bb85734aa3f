"""The manager on the real control plane: the real kube-scheduler calls the extender, the
migration controller moves real pods (bare and Job-owned), survives being killed at each
phase, and the rebalancer fills an idle node. See planemanager.py for the two stand-ins."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from managerlib import serve
from planelib import Plane, free_port
from planemanager import AgentStandIn, JobStandIn, ManagerProcess, wait_for

from specon.sdk import Checkpointer
from specon_manager.kube import Kube
from specon_manager.service import build
from specon_manager.settings import ManagerSettings

pytestmark = pytest.mark.plane

SCHED = "specon"


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


def scheduler_config(port: int, node_cache: bool) -> list[dict[str, Any]]:
    return [{"urlPrefix": f"http://127.0.0.1:{port}", "filterVerb": "filter",
             "prioritizeVerb": "prioritize", "weight": 10, "nodeCacheCapable": node_cache,
             "ignorable": True, "httpTimeout": "5s"}]


@pytest.fixture(scope="module")
def scheduler(plane: Plane, ext_port: int) -> Iterator[None]:
    plane.run_scheduler(SCHED, extenders=scheduler_config(ext_port, True))
    yield
    plane.stop_scheduler(SCHED)


def train_pod(name: str, tag: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": SCHED, "nodeSelector": {"specon-test": tag},
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "main", "image": "train:local",
                        "resources": {"requests": {"cpu": "100m"}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {
        "specon.io/training": "true", "specon.io/migratable": "true"}}, "spec": spec}


def train_job(name: str, tag: str) -> dict[str, Any]:
    pod = train_pod("x", tag)
    pod["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 3, "podReplacementPolicy": "Failed",
                     "template": {"metadata": {"labels": pod["metadata"]["labels"]},
                                  "spec": pod["spec"]}}}


def apply(plane: Plane, ns: str, obj: dict[str, Any]) -> None:
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(obj))


def pods(plane: Plane, ns: str) -> list[dict[str, Any]]:
    out = plane.kubectl("get", "pods", "-n", ns, "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def live(plane: Plane, ns: str, prefix: str) -> list[dict[str, Any]]:
    """Pods of one job that run or may run: bound and not terminating."""
    return [p for p in pods(plane, ns) if p["metadata"]["name"].startswith(prefix)
            and p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") not in ("Succeeded", "Failed")]


def bound_to(plane: Plane, ns: str, name: str) -> str | None:
    for p in pods(plane, ns):
        if p["metadata"]["name"] == name and p["status"].get("phase") == "Running":
            node: str = p["spec"].get("nodeName")
            return node
    return None


def events(plane: Plane, ns: str) -> list[str]:
    out = json.loads(plane.kubectl("get", "events", "-n", ns, "-o", "json").stdout)
    return [e["reason"] for e in out["items"]]


def agents_for(url: str, tokens: dict[str, str]) -> dict[str, AgentStandIn]:
    return {n: AgentStandIn(url, n, t) for t, n in tokens.items()}


WORKED = [["PC", "PC", "PC"], ["PC", "WC"], ["PC", "PC"], ["PC"] * 5 + ["CC"]]


def set_layout(agents: dict[str, AgentStandIn], nodes: list[str], ns: str,
               layout: list[list[str]], real: dict[str, dict[str, str]] | None = None) -> None:
    """Virtual jobs per node (they only weigh in the scores) plus real pods by node."""
    for i, node in enumerate(nodes):
        jobs = {f"virtual-{i}-{k}": c for k, c in enumerate(layout[i])}
        jobs.update((real or {}).get(node, {}))
        agents[node].set_jobs(jobs, ns)


def beat_all(agents: dict[str, AgentStandIn]) -> None:
    for a in agents.values():
        a.beat()


# -- placement -------------------------------------------------------------------------------------
class Recorder:
    """Records the body of every extender call (real HTTP from the real kube-scheduler)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.calls: list[tuple[str, dict[str, Any]]] = []

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
        self.calls.append((scope["path"], json.loads(body)))
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


@pytest.mark.parametrize("node_cache", [True, False], ids=["nodeCacheCapable", "fullNodes"])
def test_new_training_pods_land_where_the_specon_score_prefers(
    plane: Plane, mnodes: list[str], tokens: dict[str, str], plane_namespace: str, tag: str,
    node_cache: bool, tmp_path: Path,
) -> None:
    ns = plane_namespace
    port = free_port()
    (tmp_path / "tokens").write_text("".join(f"{t} {n}\n" for t, n in tokens.items()))
    settings = ManagerSettings(kubernetes=True, migration=False, heartbeat_interval_s=120,
                               kubeconfig=plane.kubeconfig, tokens_file=tmp_path / "tokens")
    app, _ = build(settings, kube=Kube.from_kubeconfig(plane.kubeconfig))
    recorder = Recorder(app)
    plane.run_scheduler("specon-place", extenders=scheduler_config(port, node_cache))
    try:
        with serve(recorder, port=port) as url:
            agents = agents_for(url, tokens)
            set_layout(agents, mnodes, ns, WORKED)
            beat_all(agents)
            pod = train_pod("p1", tag)
            pod["spec"]["schedulerName"] = "specon-place"
            apply(plane, ns, pod)
            node = wait_for("p1 running", lambda: bound_to(plane, ns, "p1"))
            assert node == mnodes[1]  # scores 6, 3.5, 4, 11
            # p1 is now a progressing job on node 1 (5.5): node 2 (4) is preferred
            agents[mnodes[1]].jobs["p1"] = {"namespace": ns, "pod": "p1", "category": "PC"}
            beat_all(agents)
            job = train_job("j1", tag)
            job["spec"]["template"]["spec"]["schedulerName"] = "specon-place"
            job["spec"]["template"]["metadata"]["labels"].pop("specon.io/migratable")
            apply(plane, ns, job)
            jp = wait_for("the Job's pod running", lambda: [
                p for p in pods(plane, ns) if p["metadata"]["name"].startswith("j1-")
                and p["status"].get("phase") == "Running"])
            assert jp[0]["spec"]["nodeName"] == mnodes[2]
            # a pod that is not a training job is not steered
            plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                     "spec": {"schedulerName": "specon-place",
                              "nodeSelector": {"specon-test": tag},
                              "containers": [{"name": "c", "image": "nginx"}]}}
            apply(plane, ns, plain)
            wait_for("web running", lambda: bound_to(plane, ns, "web"))
    finally:
        plane.stop_scheduler("specon-place")
    verbs = {v for v, _ in recorder.calls}
    assert verbs == {"/filter", "/prioritize"}
    for _, body in recorder.calls:
        assert "Pod" in body
        if node_cache:
            assert isinstance(body["NodeNames"], list) and body.get("Nodes") is None
        else:
            assert body["Nodes"]["items"][0]["metadata"]["name"].startswith(tag)
    scored = [b for v, b in recorder.calls if v == "/prioritize"
              and b["Pod"]["metadata"]["name"] == "web"]
    assert scored  # asked, and answered with zeros (untouched)


# -- migration -------------------------------------------------------------------------------------
@pytest.fixture
def manager(plane: Plane, tokens: dict[str, str], ext_port: int, tmp_path: Path,
            scheduler: None) -> Iterator[ManagerProcess]:
    mp = ManagerProcess(plane, tmp_path, tokens)
    mp.port, mp.url = ext_port, f"http://127.0.0.1:{ext_port}"
    mp.settings["port"] = ext_port
    yield mp
    mp.kill()


def crowded_source(mnodes: list[str], ns: str, agents: dict[str, AgentStandIn],
                   pod: str) -> None:
    """The worked example, with ``pod`` the converged job on the crowded node 3."""
    layout = [list(x) for x in WORKED]
    layout[3] = ["PC"] * 5
    set_layout(agents, mnodes, ns, layout, {mnodes[3]: {pod: "CC"}})


def drive(plane: Plane, ns: str, agents: dict[str, AgentStandIn], job: JobStandIn,
          prefix: str, done: Any, manager: ManagerProcess | None = None,
          timeout: float = 90) -> Any:
    """Heartbeats and training steps until ``done()``; never more than one live pod."""
    def tick() -> Any:
        if manager is not None and not manager.alive():
            return "manager-exited"
        beat_all(agents)
        job.run_steps(1)
        assert len(live(plane, ns, prefix)) <= 1, "two live pods of one job"
        return done()

    return wait_for("the migration to end", tick, timeout=timeout, every=0.3)


def replacement_of(plane: Plane, ns: str, prefix: str, original: str) -> dict[str, Any] | None:
    for p in live(plane, ns, prefix):
        if p["metadata"]["name"] != original and p["status"].get("phase") == "Running":
            return p
    return None


def test_converged_bare_pod_is_migrated_to_the_chosen_node_and_resumes(
    plane: Plane, mnodes: list[str], tokens: dict[str, str], plane_namespace: str, tag: str,
    manager: ManagerProcess, tmp_path: Path,
) -> None:
    ns = plane_namespace
    manager.start()
    apply(plane, ns, train_pod("train-a", tag, node=mnodes[3]))
    wait_for("train-a running", lambda: bound_to(plane, ns, "train-a"))
    agents = agents_for(manager.url, tokens)
    crowded_source(mnodes, ns, agents, "train-a")
    job = JobStandIn(tmp_path / "ckpt-a")
    agents[mnodes[3]].checkpoint_dirs["train-a"] = job
    job.run_steps(5)
    beat_all(agents)
    reply = agents[mnodes[3]].reallocate(ns, "train-a")
    assert reply["decision"] == "migrate" and reply["target"] == mnodes[1], reply
    assert reply["migrated"] is True
    rep = drive(plane, ns, agents, job, "train-a",
                lambda: replacement_of(plane, ns, "train-a", "train-a"))
    assert rep["spec"]["nodeName"] == mnodes[1]
    assert bound_to(plane, ns, "train-a") is None  # the original is gone
    saved = job.saved()
    assert saved is not None and saved["request"] is not None
    ann = rep["metadata"]["annotations"]
    assert ann["specon.io/migrated"] == saved["request"]  # the migration's id
    # the job on the new node resumes from the verified checkpoint
    restored = Checkpointer(job.directory, handle_sigterm=False).load()
    assert restored is not None and restored.step == job.step
    assert restored.state == job.state
    wait_for("events", lambda: {"MigrationStarted", "CheckpointRequested", "CheckpointVerified",
                                "MigrationEvicted", "MigrationCompleted"} <= set(
        events(plane, ns)))
    metrics = httpx.get(f"{manager.url}/metrics").text
    assert 'specon_migrations_total{result="completed"} 1.0' in metrics
    # at most once: asking again is answered "stay"
    agents[mnodes[1]].set_jobs({rep["metadata"]["name"]: "CC"}, ns)
    again = agents[mnodes[1]].reallocate(ns, rep["metadata"]["name"])
    assert again["decision"] == "stay" and "already migrated" in again["reason"]


def test_no_verified_checkpoint_in_time_cancels_and_the_job_stays(
    plane: Plane, mnodes: list[str], tokens: dict[str, str], plane_namespace: str, tag: str,
    manager: ManagerProcess, tmp_path: Path,
) -> None:
    ns = plane_namespace
    manager.start(checkpoint_timeout_s=3)
    apply(plane, ns, train_pod("train-b", tag, node=mnodes[3]))
    wait_for("train-b running", lambda: bound_to(plane, ns, "train-b"))
    agents = agents_for(manager.url, tokens)
    crowded_source(mnodes, ns, agents, "train-b")
    beat_all(agents)
    assert agents[mnodes[3]].reallocate(ns, "train-b")["decision"] == "migrate"
    # the job never answers (no checkpoint directory): cancelled, still where it was
    wait_for("cancelled", lambda: (beat_all(agents), "MigrationCancelled" in events(
        plane, ns))[1], timeout=40)
    assert bound_to(plane, ns, "train-b") == mnodes[3]
    assert [p["metadata"]["name"] for p in live(plane, ns, "train-b")] == ["train-b"]
    pod = json.loads(plane.kubectl("get", "pod", "-n", ns, "train-b", "-o", "json").stdout)
    assert pod["metadata"]["annotations"]["specon.io/migrated"] == "cancelled"
    assert "specon.io/migration" not in pod["metadata"]["annotations"]
    assert agents[mnodes[3]].reallocate(ns, "train-b")["decision"] == "stay"


def test_pods_that_did_not_opt_in_or_cannot_be_recreated_are_never_moved(
    plane: Plane, mnodes: list[str], tokens: dict[str, str], plane_namespace: str, tag: str,
    manager: ManagerProcess,
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
    wait_for("pods running", lambda: bound_to(plane, ns, "no-optin") and [
        p for p in pods(plane, ns) if p["metadata"]["name"].startswith("legacy-")
        and p["status"].get("phase") == "Running"])
    legacy = next(p["metadata"]["name"] for p in pods(plane, ns)
                  if p["metadata"]["name"].startswith("legacy-"))
    agents = agents_for(manager.url, tokens)
    crowded_source(mnodes, ns, agents, "no-optin")
    beat_all(agents)
    r1 = agents[mnodes[3]].reallocate(ns, "no-optin")
    assert r1["decision"] == "refused" and "opt in" in r1["reason"]
    r2 = agents[mnodes[3]].reallocate(ns, legacy)
    assert r2["decision"] == "refused" and "podReplacementPolicy" in r2["reason"]
    assert bound_to(plane, ns, "no-optin") == mnodes[3]
    assert bound_to(plane, ns, legacy) == mnodes[3]


def test_job_owned_pod_is_migrated_and_its_job_controller_recreates_it_on_the_target(
    plane: Plane, mnodes: list[str], tokens: dict[str, str], plane_namespace: str, tag: str,
    manager: ManagerProcess, tmp_path: Path,
) -> None:
    ns = plane_namespace
    manager.start()
    agents = agents_for(manager.url, tokens)
    # first make node 3 the best place, so the Job's pod lands there
    set_layout(agents, mnodes, ns, [["PC"] * 4, ["PC"] * 4, ["PC"] * 4, []])
    beat_all(agents)
    apply(plane, ns, train_job("tj", tag))
    first = wait_for("the Job's pod running", lambda: [
        p for p in live(plane, ns, "tj-") if p["status"].get("phase") == "Running"])[0]
    assert first["spec"]["nodeName"] == mnodes[3]
    name = first["metadata"]["name"]
    crowded_source(mnodes, ns, agents, name)
    job = JobStandIn(tmp_path / "ckpt-tj")
    agents[mnodes[3]].checkpoint_dirs[name] = job
    job.run_steps(3)
    beat_all(agents)
    reply = agents[mnodes[3]].reallocate(ns, name)
    assert reply["decision"] == "migrate" and reply["target"] == mnodes[1], reply
    rep = drive(plane, ns, agents, job, "tj-", lambda: replacement_of(plane, ns, "tj-", name))
    assert rep["spec"]["nodeName"] == mnodes[1]
    assert rep["metadata"]["ownerReferences"][0]["kind"] == "Job"
    jobobj = json.loads(plane.kubectl("get", "job", "-n", ns, "tj", "-o", "json").stdout)
    assert jobobj["metadata"]["annotations"]["specon.io/migrated"] == job.saved()["request"]
    restored = Checkpointer(job.directory, handle_sigterm=False).load()
    assert restored is not None and restored.state == job.state


PHASES = ["reserved", "checkpointing", "evicting", "evicting-recorded", "placing", "ungated"]


@pytest.mark.parametrize("phase", PHASES)
def test_killing_the_manager_at_each_phase_never_loses_or_duplicates_the_job(
    plane: Plane, mnodes: list[str], tokens: dict[str, str], plane_namespace: str, tag: str,
    manager: ManagerProcess, tmp_path: Path, phase: str,
) -> None:
    ns = plane_namespace
    manager.start(fault_exit_after_phase=phase)
    apply(plane, ns, train_pod("train-k", tag, node=mnodes[3]))
    wait_for("train-k running", lambda: bound_to(plane, ns, "train-k"))
    agents = agents_for(manager.url, tokens)
    crowded_source(mnodes, ns, agents, "train-k")
    job = JobStandIn(tmp_path / "ckpt-k")
    agents[mnodes[3]].checkpoint_dirs["train-k"] = job
    job.run_steps(2)
    beat_all(agents)
    # the manager may die while answering
    with contextlib.suppress(httpx.HTTPError, AssertionError):
        agents[mnodes[3]].reallocate(ns, "train-k")
    assert drive(plane, ns, agents, job, "train-k", lambda: False, manager=manager) == (
        "manager-exited")
    assert manager.wait_exit() == 137
    assert len(live(plane, ns, "train-k")) <= 1
    manager.start()  # no fault this time: it resumes or rolls back from the records

    def settled() -> str | None:
        rep = replacement_of(plane, ns, "train-k", "train-k")
        if rep is not None and bound_to(plane, ns, "train-k") is None:
            return "moved"
        if "MigrationCancelled" in events(plane, ns):
            return "stayed"
        return None

    outcome = drive(plane, ns, agents, job, "train-k", settled, manager=manager)
    alive = live(plane, ns, "train-k")
    assert len(alive) == 1, alive
    if outcome == "moved":
        assert alive[0]["spec"]["nodeName"] == mnodes[1]
        restored = Checkpointer(job.directory, handle_sigterm=False).load()
        assert restored is not None and restored.step >= 2
    else:
        assert alive[0]["metadata"]["name"] == "train-k"
        assert alive[0]["spec"]["nodeName"] == mnodes[3]
    # no gated leftovers: every pod of the job is accounted for
    gated = [p for p in pods(plane, ns) if p["spec"].get("schedulingGates")]
    assert gated == []


def test_rebalancing_moves_a_converged_job_onto_the_idle_node(
    plane: Plane, mnodes: list[str], tokens: dict[str, str], plane_namespace: str, tag: str,
    manager: ManagerProcess, tmp_path: Path,
) -> None:
    ns = plane_namespace
    manager.start(rebalance=True, rebalance_period_s=1)
    for name in ("ra", "rb"):
        apply(plane, ns, train_pod(name, tag, node=mnodes[0]))
    for name in ("ra", "rb"):
        wait_for(f"{name} running", lambda n=name: bound_to(plane, ns, n))
    agents = agents_for(manager.url, tokens)
    # every job converged; node 3 idle; node 0 holds two (above the balance factor 1)
    set_layout(agents, mnodes, ns, [[], ["CC"], ["CC"], []],
               {mnodes[0]: {"ra": "CC", "rb": "CC"}})
    jobs = {n: JobStandIn(tmp_path / f"ckpt-{n}") for n in ("ra", "rb")}
    agents[mnodes[0]].checkpoint_dirs.update(jobs)

    def moved() -> Any:
        beat_all(agents)
        for j in jobs.values():
            j.run_steps(1)
        return [p for p in live(plane, ns, "r") if p["spec"]["nodeName"] == mnodes[3]
                and p["status"].get("phase") == "Running"]

    rep = wait_for("a job rebalanced onto the idle node", moved, timeout=90, every=0.3)
    assert len(rep) == 1
    assert rep[0]["metadata"]["annotations"].get("specon.io/rebalanced")
    assert len(live(plane, ns, "r")) == 2
    metrics = httpx.get(f"{manager.url}/metrics").text
    assert 'specon_rebalance_moves_total{outcome="started"} 1.0' in metrics
