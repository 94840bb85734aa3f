"""The extender in observe mode (issue 30): kube-scheduler is answered neutrally (every node
passes, every score equal) while the scores SpeCon would give are computed and counted. Under a
real uvicorn, beside an enforcing manager given the same cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from managerlib import TOKENS, Clock, serve
from test_extender import NODES, node_obj, plain_pod, send_worked_example, training_pod

from specon_manager.app import create_app
from specon_manager.auth import NodeTokens
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState, Reservation


def started(enforcement: str) -> Iterator[tuple[str, ClusterState]]:
    settings = ManagerSettings(kubernetes=False, heartbeat_interval_s=10,
                               stale_after_intervals=3, enforcement=enforcement)
    state = ClusterState(stale_after_s=30, clock=Clock())
    with serve(create_app(settings, state=state, tokens=NodeTokens(TOKENS))) as url:
        send_worked_example(url)
        yield url, state


@pytest.fixture
def observing() -> Iterator[tuple[str, ClusterState]]:
    yield from started("observe")


@pytest.fixture
def enforcing() -> Iterator[tuple[str, ClusterState]]:
    yield from started("enforce")


def scores(url: str, body: dict[str, Any]) -> dict[str, int]:
    r = httpx.post(f"{url}/prioritize", json=body)
    assert r.status_code == 200
    return {h["Host"]: h["Score"] for h in r.json()}


def would(url: str) -> list[str]:
    return [ln for ln in httpx.get(f"{url}/metrics").text.splitlines()
            if ln.startswith("specon_manager_would_prioritize_total{")]


def test_observe_mode_scores_every_node_alike_and_counts_what_it_would_prefer(
        observing: Any, enforcing: Any) -> None:
    body = {"Pod": training_pod(), "NodeNames": NODES}
    enforced = scores(enforcing[0], body)
    assert len(set(enforced.values())) > 1  # enforcing, SpeCon prefers node-2
    assert scores(observing[0], body) == dict.fromkeys(NODES, 0)
    assert would(observing[0]) == ['specon_manager_would_prioritize_total{choice="preferred"} '
                                   '1.0']
    assert would(enforcing[0]) == []  # enforcing counts nothing as would-be
    # a pod that is not a training job is answered as always, and not counted
    assert scores(observing[0], {"Pod": plain_pod(), "NodeNames": NODES}) == dict.fromkeys(
        NODES, 0)
    assert would(observing[0]) == ['specon_manager_would_prioritize_total{choice="preferred"} '
                                   '1.0']


@pytest.mark.parametrize("form", ["NodeNames", "Nodes"])
def test_observe_mode_lets_every_node_pass_even_a_reserved_one(
        observing: Any, enforcing: Any, form: str) -> None:
    """A reservation (left by an enforcing run) filters the other nodes out when enforcing;
    observing, every node passes."""
    pod = training_pod("moved-1")
    args: dict[str, Any] = {"Pod": pod}
    if form == "NodeNames":
        args["NodeNames"] = NODES
    else:
        args["Nodes"] = {"items": [node_obj(n) for n in NODES]}
    for _, state in (observing, enforcing):
        state.reserve(Reservation("pod/default/moved-1", "m1", "node-2", "node-4",
                                  source_present=False))
    shut = httpx.post(f"{enforcing[0]}/filter", json=args).json()
    assert set(shut["FailedNodes"]) == set(NODES) - {"node-2"}
    open_ = httpx.post(f"{observing[0]}/filter", json=args).json()
    assert open_["FailedNodes"] == {}
    passed = open_["NodeNames"] if form == "NodeNames" else [
        i["metadata"]["name"] for i in open_["Nodes"]["items"]]
    assert passed == NODES
