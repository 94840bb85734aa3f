"""Quality targets and deadlines in the manager, without a cluster: the annotations read once
per pod (one InvalidQoS event for a malformed one, never a refusal), placement of a pod with a
deadline, migrations held for at-risk jobs and jobs short of slack, the rebalancer's choice by
slack, the QoS metric and the status page. tests/manager/test_qos_plane.py shows the same on
the real control plane."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from managerlib import TOKENS, auth, heartbeat, job, serve

from specon.wire import Heartbeat
from specon_manager.app import create_app
from specon_manager.auth import NodeTokens
from specon_manager.metrics import ManagerMetrics
from specon_manager.migration import MigrationController
from specon_manager.qos_book import REASON_INVALID, EventPoster, QosBook
from specon_manager.rebalance import Rebalancer
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState
from specon_manager.status import render

CREATED = "2026-11-21T12:00:00Z"


def pod(name: str = "train-1", uid: str = "", **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": uid or f"u-{name}",
                         "creationTimestamp": CREATED, "annotations": annotations,
                         "labels": {"specon.io/training": "true"}},
            "spec": {"containers": [{"name": "main", "image": "x"}]}}


class Posted:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def __call__(self, p: Mapping[str, Any], reason: str, message: str) -> None:
        self.events.append((p["metadata"]["name"], reason, message))


# -- the annotations, once per pod -------------------------------------------------------------
def test_a_malformed_spec_gets_one_event_per_pod_and_no_qos() -> None:
    posted = Posted()
    invalid: list[int] = []
    book = QosBook(post=posted, on_invalid=lambda: invalid.append(1))
    bad = pod(**{"specon.io/deadline": "tomorrow"})
    for _ in range(5):  # filter, prioritize, retries: one event
        assert book.observe(bad) is None
    assert len(posted.events) == 1 and len(invalid) == 1
    name, reason, message = posted.events[0]
    assert (name, reason) == ("train-1", REASON_INVALID)
    assert "specon.io/deadline" in message and "tomorrow" in message
    # another pod (another UID) with the same mistake gets its own event
    book.observe(pod("train-2", **{"specon.io/deadline": "tomorrow"}))
    assert [e[0] for e in posted.events] == ["train-1", "train-2"]


def test_valid_specs_are_remembered_per_pod() -> None:
    posted = Posted()
    book = QosBook(post=posted)
    spec = book.observe(pod(**{"specon.io/deadline": "2h", "specon.io/target-loss": "0.3"}))
    assert spec is not None and spec.deadline_s == 7200 and spec.target_loss == 0.3
    assert book.spec("u-train-1") == spec
    # an RFC 3339 deadline is measured from the pod's creation
    spec = book.observe(pod("t2", **{"specon.io/deadline": "2026-11-21T13:30:00Z"}))
    assert spec is not None and spec.deadline_s == 5400
    # before the creation: malformed
    assert book.observe(pod("t3", **{"specon.io/deadline": "2026-11-21T11:00:00Z"})) is None
    assert [e[0] for e in posted.events] == ["t3"]
    # no QoS annotation at all: nothing to remember, nothing to say
    assert book.observe(pod("t4")) is None and book.spec("u-t4") is None
    assert book.observe(pod("t5", **{"other": "x"})) is None
    assert len(posted.events) == 1


def test_the_book_forgets_the_oldest_pods_first() -> None:
    book = QosBook(max_pods=3)
    for i in range(5):
        book.observe(pod(f"p{i}", **{"specon.io/deadline": "1h"}))
    assert book.spec("u-p0") is None and book.spec("u-p1") is None
    assert book.spec("u-p4") is not None


def test_a_pod_without_creation_time_is_measured_from_now() -> None:
    now = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    book = QosBook(now=lambda: now)
    p = pod(**{"specon.io/deadline": "2026-11-21T13:00:00Z"})
    del p["metadata"]["creationTimestamp"]
    spec = book.observe(p)
    assert spec is not None and spec.deadline_s == 3600


def test_events_are_posted_from_a_background_thread() -> None:
    seen: list[str] = []
    gate = threading.Event()

    def send(p: Mapping[str, Any], reason: str, message: str) -> None:
        gate.wait(5)
        seen.append(reason)

    poster = EventPoster(send)
    start = time.monotonic()
    QosBook(post=poster).observe(pod(**{"specon.io/target-loss": "low"}))
    assert time.monotonic() - start < 1 and seen == []  # the caller did not wait
    gate.set()
    poster.join()
    assert seen == [REASON_INVALID]


# -- the extender ------------------------------------------------------------------------------
@pytest.fixture
def served() -> Iterator[tuple[str, ClusterState, Posted]]:
    settings = ManagerSettings(kubernetes=False, heartbeat_interval_s=10)
    state = ClusterState(stale_after_s=30)
    posted = Posted()
    metrics = ManagerMetrics()
    book = QosBook(post=posted, on_invalid=metrics.qos_invalid.inc)
    app = create_app(settings, state=state, tokens=NodeTokens(TOKENS), metrics=metrics,
                     qos=book)
    with serve(app) as url:
        yield url, state, posted


def at_risk_layout(url: str) -> None:
    """node-1: one watching job, at risk, 1 core free; node-2: one progressing job, 3 cores
    free. The SpeCon score prefers node-1 (1.5 < 2)."""
    for node, cat, load, qos in (("node-1", "WC", 3.0, "at-risk"),
                                 ("node-2", "PC", 1.0, "on-track")):
        r = httpx.post(f"{url}/v1/heartbeat", headers=auth(node), json=heartbeat(
            node, [job(f"{node}-a", cat, qos=qos, deadline=time.time() + 3600,
                       slack_s=-60.0 if qos == "at-risk" else 900.0)], load=load))
        assert r.status_code == 200, r.text


def scores(url: str, p: dict[str, Any], nodes: list[str]) -> dict[str, int]:
    r = httpx.post(f"{url}/prioritize", json={"Pod": p, "NodeNames": nodes})
    assert r.status_code == 200, r.text
    return {h["Host"]: h["Score"] for h in r.json()}


def test_a_deadline_pod_goes_to_free_cpu_not_to_a_node_with_an_at_risk_job(
    served: tuple[str, ClusterState, Posted],
) -> None:
    url, _, _ = served
    at_risk_layout(url)
    nodes = ["node-1", "node-2", "node-9"]
    assert scores(url, pod("plain"), nodes) == {"node-1": 10, "node-2": 1, "node-9": 0}
    for ann in ({"specon.io/deadline": "3h"}, {"specon.io/target-loss": "0.2"}):
        got = scores(url, pod("qos-" + next(iter(ann)).split("/")[1], **ann), nodes)
        assert got == {"node-1": 1, "node-2": 10, "node-9": 0}
    # total steps alone is no deadline: the default scoring
    assert scores(url, pod("steps", **{"specon.io/total-steps": "1000"}), nodes)["node-1"] == 10


def test_a_malformed_spec_is_scheduled_as_a_plain_training_pod(
    served: tuple[str, ClusterState, Posted],
) -> None:
    url, _, posted = served
    at_risk_layout(url)
    bad = pod("bad", **{"specon.io/deadline": "soon"})
    r = httpx.post(f"{url}/filter", json={"Pod": bad, "NodeNames": ["node-1", "node-2"]})
    assert r.json()["NodeNames"] == ["node-1", "node-2"] and r.json()["FailedNodes"] == {}
    assert scores(url, bad, ["node-1", "node-2"]) == {"node-1": 10, "node-2": 1}
    assert [(e[0], e[1]) for e in posted.events] == [("bad", REASON_INVALID)]
    metrics = httpx.get(f"{url}/metrics").text
    assert "specon_manager_qos_invalid_pods_total 1.0" in metrics


def test_qos_states_are_counted_in_the_metrics_and_shown_on_the_status_page(
    served: tuple[str, ClusterState, Posted],
) -> None:
    url, _, _ = served
    at_risk_layout(url)
    httpx.post(f"{url}/v1/heartbeat", headers=auth("node-3"), json=heartbeat(
        "node-3", [job("plain", "PC")]))
    metrics = httpx.get(f"{url}/metrics").text
    for state, n in (("at-risk", 1), ("on-track", 1), ("none", 1), ("given-up", 0),
                     ("reached", 0)):
        assert f'specon_manager_qos_jobs{{state="{state}"}} {n}.0' in metrics
    page = httpx.get(f"{url}/status").text
    assert "<th>QoS</th>" in page and "<th>slack</th>" in page
    assert "<td class=bad>at-risk</td>" in page and "<td>-60 s</td>" in page
    assert "15 min" in page  # node-2's job: 900 s of slack


def test_the_status_page_shows_predictions_with_their_band() -> None:
    state = ClusterState(stale_after_s=30)
    state.record(Heartbeat.model_validate(heartbeat("node-1", [job(
        "t", "PC", qos="on-track", predicted_finish_s=5400.0, predicted_target_s=3000.0,
        predicted_target_low_s=2400.0, predicted_target_high_s=4200.0, slack_s=1800.0)])))
    page = render(state, ManagerMetrics().registry)
    assert "<td>90 min</td>" in page  # finish
    assert "<td>50 min (40 min–70 min)</td>" in page  # target and its band
    assert "<td>30 min</td>" in page  # slack
    assert "<td class=ok>on-track</td>" in page


# -- migrations held ----------------------------------------------------------------------------
class FakeKube:
    """Just enough of the API for the controller's decisions (no cluster here)."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = {f"/api/v1/namespaces/default/pods/{p['metadata']['name']}": p
                     for p in pods}
        self.patches: list[tuple[str, Any]] = []
        self.events: list[str] = []

    def get(self, path: str) -> dict[str, Any] | None:
        return self.pods.get(path)

    def list(self, path: str, **params: str) -> list[dict[str, Any]]:
        return list(self.pods.values()) if path == "/api/v1/pods" else []

    def patch(self, path: str, body: Any, kind: str = "merge") -> dict[str, Any]:
        self.patches.append((path, body))
        return {}

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/events"):
            self.events.append(body["reason"])
        return {}


def running(name: str, node: str) -> dict[str, Any]:
    p = pod(name)
    p["metadata"]["labels"]["specon.io/migratable"] = "true"
    p["spec"]["nodeName"] = node
    p["status"] = {"phase": "Running"}
    return p


def controller(pods: list[dict[str, Any]], **settings: Any) -> (
    tuple[MigrationController, ClusterState, FakeKube]
):
    kube = FakeKube(pods)
    state = ClusterState(stale_after_s=30)
    s = ManagerSettings(kubernetes=False, **settings)
    ctl = MigrationController(kube, state, s, ManagerMetrics())  # type: ignore[arg-type]
    return ctl, state, kube


def report(node: str, jobs: list[dict[str, Any]], seq: int = 1) -> Heartbeat:
    return Heartbeat.model_validate(heartbeat(node, jobs, seq=seq))


def test_an_at_risk_job_stays_and_a_job_short_of_slack_stays() -> None:
    ctl, state, kube = controller([running("t", "node-1")])
    state.record(report("node-2", []))
    state.record(report("node-1", [job("t", "CC", uid="u-t", qos="at-risk", slack_s=-5.0),
                                   job("x", "PC"), job("y", "PC")]))
    reply = ctl.start(kube.pods["/api/v1/namespaces/default/pods/t"])
    assert reply.decision == "stay" and "at risk" in reply.reason and not reply.migrated
    assert kube.patches == [] and ctl.in_flight() == []  # nothing marked, nothing started
    state.record(report("node-1", [job("t", "CC", uid="u-t", qos="on-track", slack_s=60.0),
                                   job("x", "PC"), job("y", "PC")], seq=2))
    reply = ctl.start(kube.pods["/api/v1/namespaces/default/pods/t"])
    assert reply.decision == "stay" and "slack (60 s)" in reply.reason
    assert "120 s" in reply.reason and not reply.migrated
    # with enough slack it moves, as a job without QoS does
    state.record(report("node-1", [job("t", "CC", uid="u-t", qos="on-track", slack_s=600.0),
                                   job("x", "PC"), job("y", "PC")], seq=3))
    reply = ctl.start(kube.pods["/api/v1/namespaces/default/pods/t"])
    assert reply.decision == "migrate" and reply.target == "node-2"


def test_the_cost_of_a_migration_is_a_setting() -> None:
    ctl, state, kube = controller([running("t", "node-1")], migration_cost_s=30)
    state.record(report("node-2", []))
    state.record(report("node-1", [job("t", "CC", uid="u-t", qos="on-track", slack_s=60.0),
                                   job("x", "PC")]))
    assert ctl.start(kube.pods["/api/v1/namespaces/default/pods/t"]).decision == "migrate"


def test_a_job_without_qos_is_decided_as_before() -> None:
    ctl, state, kube = controller([running("t", "node-1")])
    state.record(report("node-2", []))
    state.record(report("node-1", [job("t", "CC", uid="u-t"), job("x", "PC")]))
    reply = ctl.start(kube.pods["/api/v1/namespaces/default/pods/t"])
    assert reply.decision == "migrate" and reply.target == "node-2"
    # a report about another pod of the same name (another UID) says nothing of this one
    ctl, state, kube = controller([running("t", "node-1")])
    state.record(report("node-2", []))
    state.record(report("node-1", [job("t", "CC", uid="other", qos="at-risk"),
                                   job("x", "PC")]))
    assert ctl.start(kube.pods["/api/v1/namespaces/default/pods/t"]).decision == "migrate"


def test_the_rebalancer_moves_the_job_with_the_most_slack_and_never_one_at_risk() -> None:
    names = ("a", "b", "c", "d")

    def round_with(qos: dict[str, tuple[str, float | None]]) -> list[str]:
        """One round: the four jobs converged on node-1, node-2 idle (one move)."""
        ctl, state, _ = controller([running(n, "node-1") for n in names])
        state.record(report("node-2", []))
        state.record(report("node-1", [
            job(n, "CC", uid=f"u-{n}", qos=qos.get(n, ("none", None))[0],
                slack_s=qos.get(n, ("none", None))[1]) for n in names]))
        reb = Rebalancer(ctl.kube, state, ctl, ctl.settings, ctl.metrics)
        return [mv.job for mv in reb.run_once()]

    # without QoS, Algorithm 5 as before: all converged together, the first by name
    assert round_with({}) == ["default/a"]
    qos: dict[str, tuple[str, float | None]] = {
        "a": ("on-track", 300.0), "b": ("on-track", 5000.0), "c": ("at-risk", None)}
    assert round_with(qos) == ["default/d"]  # no deadline: infinite slack
    qos["d"] = ("on-track", 130.0)
    assert round_with(qos) == ["default/b"]  # the most slack
    qos["b"] = ("at-risk", 9000.0)  # at risk: never moved, whatever its slack
    assert round_with(qos) == ["default/a"]
    qos["a"] = ("on-track", 100.0)  # less than a migration costs (120 s): stays
    assert round_with(qos) == ["default/d"]
    qos["d"] = ("on-track", 50.0)
    assert round_with(qos) == []


def test_in_observe_mode_a_would_be_move_is_marked_observed_and_a_held_job_is_not() -> None:
    # The rebalancer labels its outcome by the reply's mark, not by the words of its reason.
    ctl, state, kube = controller([running(n, "node-1") for n in ("a", "b")],
                                  enforcement="observe")
    state.record(report("node-2", []))
    state.record(report("node-1", [job("a", "CC", uid="u-a", qos="at-risk", slack_s=-5.0),
                                   job("b", "CC", uid="u-b")]))
    held = ctl.start(kube.pods["/api/v1/namespaces/default/pods/a"], reason="rebalance",
                     target="node-2")
    assert held.decision == "stay" and not held.observed and not held.migrated
    reb = Rebalancer(ctl.kube, state, ctl, ctl.settings, ctl.metrics)
    assert reb.run_once() == []  # b would move to node-2; nothing is started
    moved = ctl.start(kube.pods["/api/v1/namespaces/default/pods/b"], reason="rebalance",
                      target="node-2")
    assert moved.decision == "stay" and moved.observed and moved.migrated
    assert moved.reason == "observe mode: would migrate to node-2; not moved"
    assert kube.events == ["WouldMigrate"] and kube.patches == [] and ctl.in_flight() == []
    moves = {o: ctl.metrics.registry.get_sample_value(
        "specon_manager_rebalance_moves_total", {"outcome": o}) for o in ("observed", "refused")}
    assert moves == {"observed": 1.0, "refused": None}
