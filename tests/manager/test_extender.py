"""The extender's filter and prioritize calls, in kube-scheduler's JSON, under a real uvicorn.
(The plane tests show the real kube-scheduler sending and reading the same shapes.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from managerlib import TOKENS, Clock, auth, heartbeat, job, serve

from specon.wire import Heartbeat
from specon_manager.app import create_app
from specon_manager.auth import NodeTokens
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState, Reservation


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def manager(clock: Clock) -> Iterator[tuple[str, ClusterState]]:
    settings = ManagerSettings(kubernetes=False, heartbeat_interval_s=10, stale_after_intervals=3)
    state = ClusterState(stale_after_s=30, clock=clock)
    app = create_app(settings, state=state, tokens=NodeTokens(TOKENS))
    with serve(app) as url:
        yield url, state


def training_pod(name: str = "train-1", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": "u-" + name,
                         "labels": {"specon.io/training": "true"}, **meta},
            "spec": {"containers": [{"name": "main", "image": "x"}]}}


def plain_pod() -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}


def node_obj(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "4"}}}


def send_worked_example(url: str) -> None:
    """The research's worked example: 3, 2, 2 active jobs on workers 1-3, 6 on worker 4
    (scores 6, 3.5, 4 and 11)."""
    layout = {
        "node-1": ["PC", "PC", "PC"],
        "node-2": ["PC", "WC"],
        "node-3": ["PC", "PC"],
        "node-4": ["PC", "PC", "PC", "PC", "PC", "CC"],
    }
    for node, cats in layout.items():
        r = httpx.post(f"{url}/v1/heartbeat", headers=auth(node), json=heartbeat(
            node, [job(f"{node}-{i}", c) for i, c in enumerate(cats)]))
        assert r.status_code == 200


NODES = ["node-1", "node-2", "node-3", "node-4"]


def test_prioritize_prefers_the_lowest_specon_score(manager: Any) -> None:
    url, _ = manager
    send_worked_example(url)
    r = httpx.post(f"{url}/prioritize", json={"Pod": training_pod(), "NodeNames": NODES})
    assert r.status_code == 200
    scores = {h["Host"]: h["Score"] for h in r.json()}
    assert set(r.json()[0]) == {"Host", "Score"}
    assert max(scores, key=lambda n: scores[n]) == "node-2"
    assert scores["node-2"] == 10 and scores["node-4"] == 1
    assert scores["node-2"] > scores["node-3"] > scores["node-1"] > scores["node-4"]


def test_load_breaks_a_tie_between_equal_scores(manager: Any) -> None:
    url, _ = manager
    for node, load in (("node-1", 3.0), ("node-2", 0.5)):
        httpx.post(f"{url}/v1/heartbeat", headers=auth(node),
                   json=heartbeat(node, [job(f"{node}-a", "PC")], load=load))
    r = httpx.post(f"{url}/prioritize", json={"Pod": training_pod(),
                                              "NodeNames": ["node-1", "node-2"]})
    scores = {h["Host"]: h["Score"] for h in r.json()}
    assert scores["node-2"] > scores["node-1"] > 0


def test_unknown_and_stale_nodes_score_zero_never_idle(manager: Any, clock: Clock) -> None:
    url, _ = manager
    httpx.post(f"{url}/v1/heartbeat", headers=auth("node-1"),
               json=heartbeat("node-1", [job("a", "PC"), job("b", "PC")]))
    clock.now += 31  # node-1 is now stale (30 s)
    httpx.post(f"{url}/v1/heartbeat", headers=auth("node-2"),
               json=heartbeat("node-2", [job("c", "PC"), job("d", "PC"), job("e", "PC")]))
    r = httpx.post(f"{url}/prioritize", json={
        "Pod": training_pod(), "NodeNames": ["node-1", "node-2", "node-9"]})
    scores = {h["Host"]: h["Score"] for h in r.json()}
    # node-1 had fewer jobs, but its last word is too old: unknown. node-9 never reported.
    assert scores == {"node-1": 0, "node-2": 10, "node-9": 0}
    # it comes back with its next heartbeat
    httpx.post(f"{url}/v1/heartbeat", headers=auth("node-1"),
               json=heartbeat("node-1", [job("a", "PC")], seq=2))
    r = httpx.post(f"{url}/prioritize", json={"Pod": training_pod(),
                                              "NodeNames": ["node-1", "node-2"]})
    assert {h["Host"]: h["Score"] for h in r.json()} == {"node-1": 10, "node-2": 1}


def test_pods_that_are_not_training_jobs_pass_untouched(manager: Any) -> None:
    url, state = manager
    send_worked_example(url)
    state.reserve(Reservation("pod/default/web", "m1", "node-1", "node-4"))
    r = httpx.post(f"{url}/filter", json={"Pod": plain_pod(), "NodeNames": NODES})
    assert r.json()["NodeNames"] == NODES and r.json()["FailedNodes"] == {}
    r = httpx.post(f"{url}/prioritize", json={"Pod": plain_pod(), "NodeNames": NODES})
    assert r.json() == [{"Host": n, "Score": 0} for n in NODES]


def test_scheduler_name_makes_a_pod_a_training_job(manager: Any) -> None:
    url, _ = manager
    send_worked_example(url)
    pod = plain_pod()
    pod["spec"]["schedulerName"] = "specon"
    r = httpx.post(f"{url}/prioritize", json={"Pod": pod, "NodeNames": NODES})
    assert {h["Host"]: h["Score"] for h in r.json()}["node-2"] == 10


def test_filter_with_node_names_answers_node_names(manager: Any) -> None:
    url, _ = manager
    r = httpx.post(f"{url}/filter", json={"Pod": training_pod(), "NodeNames": NODES})
    body = r.json()
    assert body["NodeNames"] == NODES
    assert body["Nodes"] is None
    assert body["FailedNodes"] == {} and body["FailedAndUnresolvableNodes"] == {}
    assert body["Error"] == ""


def test_filter_with_full_nodes_answers_full_nodes(manager: Any) -> None:
    url, _ = manager
    items = [node_obj(n) for n in NODES]
    r = httpx.post(f"{url}/filter", json={
        "Pod": training_pod(), "Nodes": {"metadata": {}, "items": items}, "NodeNames": None})
    body = r.json()
    assert body["Nodes"]["items"] == items
    assert body["NodeNames"] is None
    r = httpx.post(f"{url}/prioritize", json={
        "Pod": training_pod(), "Nodes": {"metadata": {}, "items": items}, "NodeNames": None})
    assert [h["Host"] for h in r.json()] == NODES


def test_reserved_replacement_waits_for_its_source_then_goes_only_to_the_target(
    manager: Any
) -> None:
    url, state = manager
    send_worked_example(url)
    job_uid = "job-uid-1"
    replacement = training_pod("train-abc12", ownerReferences=[
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": job_uid,
         "controller": True}])
    state.reserve(Reservation(f"job/{job_uid}", "m1", "node-3", "node-4"))
    items = [node_obj(n) for n in NODES]
    r = httpx.post(f"{url}/filter", json={"Pod": replacement, "Nodes": {"items": items}})
    body = r.json()
    assert body["Nodes"]["items"] == []  # the old pod still exists: never two pods of one job
    assert all("waiting for the pod it replaces" in v for v in body["FailedNodes"].values())
    state.source_gone(f"job/{job_uid}")
    r = httpx.post(f"{url}/filter", json={"Pod": replacement, "NodeNames": NODES})
    assert r.json()["NodeNames"] == ["node-3"]
    assert "reserved for node node-3" in r.json()["FailedNodes"]["node-1"]
    r = httpx.post(f"{url}/prioritize", json={"Pod": replacement, "NodeNames": NODES})
    assert {h["Host"]: h["Score"] for h in r.json()}["node-3"] == 10
    # an unrelated training pod is scored with the incoming job counted on node-3
    r = httpx.post(f"{url}/prioritize", json={"Pod": training_pod(), "NodeNames": NODES})
    scores = {h["Host"]: h["Score"] for h in r.json()}
    assert scores["node-2"] == 10
    assert scores["node-3"] < scores["node-2"]


def test_a_namesake_of_the_source_is_its_replacement_and_goes_to_the_target_at_once(
    manager: Any
) -> None:
    """A StatefulSet or PyTorchJob recreates the evicted pod under its name as soon as it is
    gone: a pod of that name asking for a node proves the source is gone (names are unique,
    the bound source is never scheduled again), before the manager has looked."""
    url, state = manager
    send_worked_example(url)
    owner = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "pj",
              "uid": "pj-uid", "controller": True}]
    state.reserve(Reservation("job/pj-uid", "m1", "node-3", "node-4",
                              pod="default/pj-master-0"))
    same = training_pod("pj-master-0", ownerReferences=owner)
    r = httpx.post(f"{url}/filter", json={"Pod": same, "NodeNames": NODES})
    assert r.json()["NodeNames"] == ["node-3"]
    assert "reserved for node node-3" in r.json()["FailedNodes"]["node-1"]
    # another pod of the same owner still waits for the source
    other = training_pod("pj-worker-0", ownerReferences=owner)
    r = httpx.post(f"{url}/filter", json={"Pod": other, "NodeNames": NODES})
    assert r.json()["NodeNames"] == []
    assert all("waiting for the pod it replaces" in v for v in r.json()["FailedNodes"].values())


@pytest.mark.parametrize("body", [
    {"NodeNames": ["a"]},
    {"Pod": "x", "NodeNames": ["a"]},
    {"Pod": {}, "NodeNames": "a"},
    {"Pod": {}, "Nodes": {"items": [{"no": "metadata"}]}},
    [1, 2],
])
def test_malformed_extender_args_get_400(manager: Any, body: Any) -> None:
    url, _ = manager
    for verb in ("filter", "prioritize"):
        r = httpx.post(f"{url}/{verb}", json=body)
        assert r.status_code == 400, (verb, r.text)


RECORDED = Path(__file__).parent / "fixtures" / "extender"


@pytest.mark.parametrize("form", ["nodeNames", "fullNodes"])
def test_requests_recorded_from_the_real_kube_scheduler_are_answered_in_kind(
    manager: Any, form: str
) -> None:
    """Replays ExtenderArgs that kube-scheduler 1.33 sent in the plane test (rewritten with
    SPECON_RECORD_FIXTURES=1): the reply uses the same form, keeps every node, and scores by
    the SpeCon score."""
    url, state = manager
    args = json.loads((RECORDED / f"filter-{form}.json").read_text())
    names = args["NodeNames"] or [n["metadata"]["name"] for n in args["Nodes"]["items"]]
    assert len(names) == 4 and ("Nodes" in args and "NodeNames" in args)
    # the worked example on the recorded nodes (scores 6, 3.5, 4 and 11)
    for name, cats in zip(names, (["PC"] * 3, ["PC", "WC"], ["PC"] * 2, ["PC"] * 5 + ["CC"]),
                          strict=True):
        state.record(Heartbeat.model_validate(heartbeat(
            name, [job(f"{name}-{i}", c) for i, c in enumerate(cats)])))
    r = httpx.post(f"{url}/filter", content=json.dumps(args),
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 200
    reply = r.json()
    assert reply["FailedNodes"] == {} and reply["Error"] == ""
    if form == "nodeNames":
        assert reply["NodeNames"] == names and reply["Nodes"] is None
    else:
        assert reply["Nodes"]["items"] == args["Nodes"]["items"] and reply["NodeNames"] is None
    prio = json.loads((RECORDED / f"prioritize-{form}.json").read_text())
    r = httpx.post(f"{url}/prioritize", content=json.dumps(prio),
                   headers={"Content-Type": "application/json"})
    scores = {h["Host"]: h["Score"] for h in r.json()}
    assert max(scores, key=lambda n: scores[n]) == names[1]
    assert scores[names[3]] == min(scores.values()) >= 1
