"""Fuzzing the manager's HTTP surface (hypothesis) against a real uvicorn: generated requests
across the extender, the heartbeat and reallocation API and the read-only endpoints; never a
5xx, the server still answers afterwards, and its memory stays bounded.

The test command runs the short form, 650 examples per endpoint group (2,600 requests, every
assertion the same); the long form, over 10,000 requests, is a benchmark:
``SPECON_FUZZ_EXAMPLES=2600 pytest tests/manager/test_fuzz_http.py`` (benchmarks/long_forms.sh).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from managerlib import TOKENS, auth, heartbeat, job, serve

from specon_manager.app import create_app
from specon_manager.auth import NodeTokens
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState

#: Per endpoint group, four groups (the long form: 2600, over 10,000 requests in all).
EXAMPLES = int(os.environ.get("SPECON_FUZZ_EXAMPLES", "650"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12)


def maybe(value: Any) -> st.SearchStrategy[Any]:
    """The right value, or any JSON value in its place."""
    return st.one_of(st.just(value), json_values)


pods = st.fixed_dictionaries({}, optional={
    "metadata": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "name": maybe("t"), "namespace": maybe("default"), "uid": maybe("u-1"),
        "labels": st.one_of(st.just({"specon.io/training": "true"}), json_values),
        "annotations": st.one_of(st.dictionaries(st.sampled_from([
            "specon.io/deadline", "specon.io/target-loss", "specon.io/total-steps", "x"]),
            st.text(max_size=30), max_size=3), json_values),
        "ownerReferences": st.one_of(st.just([{"controller": True, "kind": "Job",
                                               "uid": "j"}]), json_values),
        "creationTimestamp": maybe("2026-01-01T00:00:00Z")})),
    "spec": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "schedulerName": maybe("specon")})),
})
extender_args = st.one_of(json_values, st.fixed_dictionaries({"Pod": pods}, optional={
    "NodeNames": st.one_of(st.lists(st.sampled_from(["node-1", "node-2", "node-x"]) | st.text(
        max_size=12), max_size=6), json_values),
    "Nodes": st.one_of(json_values, st.fixed_dictionaries({"items": st.lists(
        st.fixed_dictionaries({"metadata": st.one_of(
            st.fixed_dictionaries({"name": maybe("node-1")}), json_values)}), max_size=4)})),
}))
jobs = st.fixed_dictionaries({"namespace": maybe("default"), "pod": maybe("p"),
                              "category": maybe("PC")}, optional={
    "uid": maybe("u"), "qos": maybe("at-risk"), "slack_s": maybe(10.0),
    "checkpoint": json_values, "loss": maybe(0.5), "step": maybe(3)})
heartbeats = st.one_of(json_values, st.fixed_dictionaries({
    "node": maybe("node-1"),
    "time": st.one_of(st.just(time.time()), st.floats(allow_nan=False, allow_infinity=False),
                      json_values),
    "seq": st.one_of(st.integers(min_value=-5, max_value=10**30), json_values),
    "capacity_cpus": maybe(4.0), "load_cores": maybe(1.0)},
    optional={"jobs": st.one_of(st.lists(jobs, max_size=4), json_values),
              "protocol": maybe("specon/v1"), "extra": json_values}))
headers = st.sampled_from([auth("node-1"), auth("node-2"), {"Authorization": "Bearer nope"},
                           {"Authorization": "Basic x"}, {}])
raw_bodies = st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode))


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[httpx.Client, list[int]]]:
    state = ClusterState(stale_after_s=30)
    app = create_app(ManagerSettings(kubernetes=False, max_agent_body_bytes=64 * 1024,
                                     max_extender_body_bytes=256 * 1024),
                     state=state, tokens=NodeTokens(TOKENS))
    with serve(app) as url, httpx.Client(base_url=url, timeout=30) as c:
        c.post("/v1/heartbeat", headers=auth("node-1"),
               json=heartbeat("node-1", [job("p", "PC")]))
        count = [0]
        before = rss_mib()
        yield c, count
        # still alive, still right, and memory bounded after everything
        assert c.get("/healthz").text == "ok"
        r = c.post("/v1/heartbeat", headers=auth("node-1"), json=heartbeat("node-1", seq=2**40))
        assert r.status_code == 200 and r.json()["accepted"] is True
        assert count[0] >= 4 * EXAMPLES
        assert rss_mib() - before < 200


def check(r: httpx.Response, count: list[int]) -> None:
    count[0] += 1
    assert r.status_code < 500, (r.status_code, r.text[:500])


@pytest.mark.slow
@SETTINGS
@given(verb=st.sampled_from(["filter", "prioritize"]),
       body=st.one_of(extender_args.map(lambda v: ("json", v)), raw_bodies.map(lambda b: (
           "raw", b))))
def test_fuzz_extender(server: Any, verb: str, body: tuple[str, Any]) -> None:
    c, count = server
    kind, value = body
    r = (c.post(f"/{verb}", json=value) if kind == "json" else
         c.post(f"/{verb}", content=value, headers={"Content-Type": "application/json"}))
    check(r, count)


@pytest.mark.slow
@SETTINGS
@given(hdr=headers, body=heartbeats)
def test_fuzz_heartbeat(server: Any, hdr: dict[str, str], body: Any) -> None:
    c, count = server
    check(c.post("/v1/heartbeat", json=body, headers=hdr), count)


@pytest.mark.slow
@SETTINGS
@given(hdr=headers, body=st.one_of(json_values, st.fixed_dictionaries({
    "node": maybe("node-1"), "namespace": maybe("default"), "pod": maybe("p"),
    "time": maybe(1.0)}, optional={"uid": maybe("u"), "reason": maybe("converged")})),
    raw=st.none() | raw_bodies)
def test_fuzz_reallocate(server: Any, hdr: dict[str, str], body: Any, raw: bytes | None) -> None:
    c, count = server
    if raw is None:
        r = c.post("/v1/reallocate", json=body, headers=hdr)
    else:
        r = c.post("/v1/reallocate", content=raw, headers={**hdr,
                                                            "Content-Type": "application/json"})
    check(r, count)


@pytest.mark.slow
@SETTINGS
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
       path=st.sampled_from(["/metrics", "/status", "/status/whatif-input", "/healthz",
                             "/readyz", "/docs",
                             "/openapi.json", "/v1/heartbeat", "/filter", "/nope"]),
       body=raw_bodies)
def test_fuzz_other_endpoints(server: Any, method: str, path: str, body: bytes) -> None:
    c, count = server
    check(c.request(method, path, content=body if method != "GET" else None), count)
