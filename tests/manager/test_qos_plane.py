"""Quality targets and deadlines with the manager on the real control plane: the real
kube-scheduler calls the real ``specon-manager`` process; heartbeats are sent over its real
HTTP API (KWOK nodes run no agents). A malformed deadline gets one InvalidQoS event and the pod
is still scheduled; a pod with a deadline lands on the node with free CPU rather than the one
with an at-risk job, where the SpeCon score prefers the other; an at-risk job's reallocation
request is answered "stay"."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from managerlib import heartbeat, job
from planelib import Plane, free_port
from planemanager import (
    Api,
    ManagerProcess,
    apply,
    placeholder_pods,
    running_on,
    scheduler_config,
    train_pod,
    wait_for,
)

pytestmark = pytest.mark.plane

SCHED = "specon-qos"


@pytest.fixture(scope="module")
def qtag() -> str:
    return f"q{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def qnodes(plane: Plane, qtag: str) -> list[str]:
    return plane.add_nodes(2, prefix=qtag, labels={"specon-test": qtag})


@pytest.fixture(scope="module")
def qtokens(qnodes: list[str]) -> dict[str, str]:
    return {f"tok-{uuid.uuid4().hex}": n for n in qnodes}


@pytest.fixture(scope="module")
def qapi(plane: Plane) -> Iterator[Api]:
    client = Api(plane)
    yield client
    client.close()


@pytest.fixture
def qmanager(plane: Plane, qtokens: dict[str, str], tmp_path: Path) -> Iterator[ManagerProcess]:
    port = free_port()
    plane.run_scheduler(SCHED, extenders=scheduler_config(port, True))
    mp = ManagerProcess(plane, tmp_path, qtokens, port=port, scheduler_name=SCHED)
    try:
        mp.start()
        yield mp
    finally:
        mp.kill()
        plane.stop_scheduler(SCHED)


class Beats:
    """Heartbeats for the test's nodes over the manager's API (what agents send)."""

    def __init__(self, url: str, tokens: dict[str, str]) -> None:
        self.url = url
        self.token = {n: t for t, n in tokens.items()}
        self.seq = 0

    def send(self, node: str, jobs: list[dict[str, Any]], load: float) -> None:
        self.seq += 1
        r = httpx.post(f"{self.url}/v1/heartbeat", json=heartbeat(
            node, jobs, seq=self.seq, load=load, cpus=4),
            headers={"Authorization": f"Bearer {self.token[node]}"}, timeout=5)
        assert r.status_code == 200, r.text


def qos_pod(name: str, tag: str, **annotations: str) -> dict[str, Any]:
    pod = train_pod(name, tag, SCHED)
    pod["metadata"]["annotations"] = annotations
    return pod


def events_of(api: Api, ns: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in api.event_items(ns) if e["reason"] == reason]


def test_a_malformed_deadline_gets_one_invalid_qos_event_and_the_pod_is_scheduled(
    plane: Plane, qapi: Api, qnodes: list[str], qtokens: dict[str, str], plane_namespace: str,
    qtag: str, qmanager: ManagerProcess,
) -> None:
    ns = plane_namespace
    beats = Beats(qmanager.url, qtokens)
    for node in qnodes:
        beats.send(node, [], load=0.5)
    apply(plane, ns, qos_pod("late", qtag, **{"specon.io/deadline": "tomorrow"}))
    node = wait_for("late running", lambda: running_on(qapi, ns, "late"))
    assert node in qnodes
    ev = wait_for("the InvalidQoS event", lambda: events_of(qapi, ns, "InvalidQoS"))
    pod = qapi.pod(ns, "late")
    assert pod is not None
    assert len(ev) == 1 and ev[0]["type"] == "Warning"
    assert ev[0]["reportingController"] == "specon-manager"
    assert ev[0]["regarding"]["name"] == "late"
    assert ev[0]["regarding"]["uid"] == pod["metadata"]["uid"]
    assert "specon.io/deadline" in ev[0]["note"] and "tomorrow" in ev[0]["note"]
    # the same pod asked about again (a retry, another replica's cache miss): no second event
    for verb in ("filter", "prioritize"):
        r = httpx.post(f"{qmanager.url}/{verb}", json={"Pod": pod, "NodeNames": qnodes})
        assert r.status_code == 200
    time.sleep(1)
    assert len(events_of(qapi, ns, "InvalidQoS")) == 1
    metrics = httpx.get(f"{qmanager.url}/metrics").text
    assert "specon_manager_qos_invalid_pods_total 1.0" in metrics


def test_a_deadline_pod_lands_on_free_cpu_not_beside_an_at_risk_job(
    plane: Plane, qapi: Api, qnodes: list[str], qtokens: dict[str, str], plane_namespace: str,
    qtag: str, qmanager: ManagerProcess,
) -> None:
    ns = plane_namespace
    risky, free = qnodes
    beats = Beats(qmanager.url, qtokens)
    deadline = time.time() + 3600
    placeholder_pods(plane, ns, {"virtual-w": risky, "virtual-p": free})
    # risky: one watching job, at risk, 3 of 4 cores busy (SpeCon score 1.5);
    # free: one progressing job, on track, 1 core busy (SpeCon score 2)
    beats.send(risky, [job("virtual-w", "WC", namespace=ns, qos="at-risk", deadline=deadline,
                           slack_s=-120.0)], load=3.0)
    beats.send(free, [job("virtual-p", "PC", namespace=ns, qos="on-track", deadline=deadline,
                          slack_s=1800.0)], load=1.0)
    # a training pod without QoS goes where the SpeCon score says: beside the at-risk job
    apply(plane, ns, qos_pod("plain", qtag))
    assert wait_for("plain running", lambda: running_on(qapi, ns, "plain")) == risky
    # a pod with a deadline goes to the free CPU
    apply(plane, ns, qos_pod("due", qtag, **{"specon.io/deadline": "2h"}))
    assert wait_for("due running", lambda: running_on(qapi, ns, "due")) == free
    # the extender's answers for the two pods, as the scheduler got them
    for name, best in (("plain", risky), ("due", free)):
        pod = qapi.pod(ns, name)
        r = httpx.post(f"{qmanager.url}/prioritize", json={"Pod": pod, "NodeNames": qnodes})
        scores = {h["Host"]: h["Score"] for h in r.json()}
        assert scores[best] == 10 and min(scores.values()) == 1, (name, scores)
    metrics = httpx.get(f"{qmanager.url}/metrics").text
    assert 'specon_manager_qos_jobs{state="at-risk"} 1.0' in metrics
    assert 'specon_manager_qos_jobs{state="on-track"} 1.0' in metrics
    page = httpx.get(f"{qmanager.url}/status").text
    assert "at-risk" in page and "<td>-2 min</td>" in page and "<td>30 min</td>" in page


def test_an_at_risk_job_asked_to_move_stays(
    plane: Plane, qapi: Api, qnodes: list[str], qtokens: dict[str, str], plane_namespace: str,
    qtag: str, qmanager: ManagerProcess,
) -> None:
    ns = plane_namespace
    src, other = qnodes
    pod = qos_pod("risky", qtag, **{"specon.io/deadline": "1h"})
    pod["spec"]["nodeName"] = src
    apply(plane, ns, pod)
    wait_for("risky running", lambda: running_on(qapi, ns, "risky"))
    obj = qapi.pod(ns, "risky")
    assert obj is not None
    uid = obj["metadata"]["uid"]
    beats = Beats(qmanager.url, qtokens)
    placeholder_pods(plane, ns, {"virtual-1": src, "virtual-2": src})

    def report(qos: str, slack: float) -> None:
        beats.send(src, [job("risky", "CC", namespace=ns, uid=uid, qos=qos, slack_s=slack,
                             checkpointable=True, deadline=time.time() + 3600),
                         job("virtual-1", "PC", namespace=ns), job("virtual-2", "PC",
                                                                   namespace=ns)], load=3.0)
        beats.send(other, [], load=0.0)

    def reallocate() -> dict[str, Any]:
        r = httpx.post(f"{qmanager.url}/v1/reallocate", json={
            "node": src, "namespace": ns, "pod": "risky", "uid": uid, "time": time.time()},
            headers={"Authorization": f"Bearer {beats.token[src]}"}, timeout=10)
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out

    report("at-risk", -300.0)
    reply = reallocate()
    assert reply["decision"] == "stay" and "at risk" in reply["reason"], reply
    assert reply["migrated"] is False  # not marked: it may ask again once it has slack
    report("on-track", 60.0)  # on track, but a move (120 s) would eat more than its slack
    reply = reallocate()
    assert reply["decision"] == "stay" and "slack (60 s)" in reply["reason"], reply
    obj = qapi.pod(ns, "risky")
    assert obj is not None and obj["spec"]["nodeName"] == src
    annotations = obj["metadata"].get("annotations") or {}
    assert "specon.io/migration" not in annotations and "specon.io/migrated" not in annotations
    assert not events_of(qapi, ns, "MigrationStarted")
    metrics = httpx.get(f"{qmanager.url}/metrics").text
    assert 'specon_manager_reallocation_requests_total{decision="stay"} 2.0' in metrics
    assert 'specon_manager_migrations_held_total{reason="converged"} 2.0' in metrics
    # with slack to spare, the same request starts a migration (to the idle node)
    report("on-track", 3000.0)
    reply = reallocate()
    assert reply["decision"] == "migrate" and reply["target"] == other, reply


def test_heartbeat_jobs_that_are_not_pods_on_the_node_are_ignored(
        plane: Plane, plane_namespace: str) -> None:
    """The manager's pod directory against the real API server: a node's report of a pod on
    another node, of a pod that does not exist, or of a pod under a wrong UID is dropped
    (once the directory has looked them up) and counted; its own pod is kept."""
    from specon_manager.app import create_app
    from specon_manager.auth import NodeTokens
    from specon_manager.kube import Kube
    from specon_manager.pods import PodDirectory
    from specon_manager.settings import ManagerSettings
    from specon_manager.state import ClusterState

    nodes = plane.add_nodes(2, prefix=f"podsdir-{uuid.uuid4().hex[:6]}")
    kube = Kube.from_kubeconfig(plane.kubeconfig)
    uids = {}
    for name, node in (("mine", nodes[0]), ("theirs", nodes[1])):
        pod = kube.create(f"/api/v1/namespaces/{plane_namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x"}]}})
        uids[name] = pod["metadata"]["uid"]
    tokens = {"pods-directory-token-0001": nodes[0]}
    state = ClusterState(stale_after_s=600)
    directory = PodDirectory(kube.get)
    app = create_app(ManagerSettings(kubernetes=False), state=state,
                     tokens=NodeTokens(tokens), pod_on_node=directory.on_node)
    report = [job("mine", "CC", namespace=plane_namespace, uid=uids["mine"]),
              job("theirs", "CC", namespace=plane_namespace, uid=uids["theirs"]),
              job("ghost", "CC", namespace=plane_namespace, uid="ghost-uid",
                  checkpointable=True),
              job("mine", "CC", namespace="kube-system", uid=uids["mine"])]
    from servelib import serve
    with serve(app) as url:
        def send(seq: int) -> None:
            r = httpx.post(f"{url}/v1/heartbeat", json=heartbeat(nodes[0], report, seq=seq),
                           headers={"Authorization": "Bearer pods-directory-token-0001"})
            assert r.status_code == 200, r.text

        # first sight: not known yet, kept (a heartbeat never waits for the API server)
        send(1)
        hb = state.heartbeat(nodes[0])
        assert hb is not None and len(hb.jobs) == 4
        deadline = time.monotonic() + 30
        while any(directory.on_node(j["namespace"], j["pod"], j["uid"], nodes[0]) is None
                  for j in report):
            assert time.monotonic() < deadline, "the pod directory did not answer"
            time.sleep(0.1)
        send(2)
        hb = state.heartbeat(nodes[0])
        assert hb is not None
        assert [(j.namespace, j.pod) for j in hb.jobs] == [(plane_namespace, "mine")]
        metrics = httpx.get(f"{url}/metrics").text
        assert "specon_manager_heartbeat_jobs_ignored_total 3.0" in metrics
    kube.close()
