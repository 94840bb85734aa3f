"""Issue 29, item 5: the extender read ``ownerReferences[].kind`` as a set member, so a training
pod whose kind was a list or an object got a 500 (``TypeError: unhashable``). Schema-aware
fuzzing over the real ASGI app under uvicorn: a well-formed training pod (owned by a Job that
has a reservation, so the reservation path runs too) with one to three of the fields the
extender reads replaced by a value of any JSON type; never a 5xx, and a wrongly typed field
is a 400 that names it."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servelib import serve

from specon.names import ANNOTATION_MIGRATION_ID
from specon_manager.app import create_app
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState, Reservation

OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid",
         "controller": True}
POD = {"metadata": {
    "name": "train-abc", "namespace": "default", "uid": "pod-uid",
    "creationTimestamp": "2026-01-01T00:00:00Z",
    "labels": {"specon.io/training": "true"},
    "annotations": {"specon.io/deadline": "2h", "specon.io/target-loss": "0.1",
                    "specon.io/total-steps": "100", ANNOTATION_MIGRATION_ID: "mig-1"},
    "ownerReferences": [OWNER]},
    "spec": {"schedulerName": "specon"}}
BY_NAMES = {"Pod": POD, "NodeNames": ["node-1", "node-2"]}
BY_NODES = {"Pod": POD, "Nodes": {"items": [{"metadata": {"name": "node-1"}},
                                            {"metadata": {"name": "node-2"}}]}}

#: Every place the extender reads (specon_manager/extender.py, state.job_key and
#: reservation_key, names.opted_in, the QoS book).
META = ("Pod", "metadata")
OWNER_AT = (*META, "ownerReferences", 0)
PATHS: list[tuple[Any, ...]] = [
    ("Pod",), META, ("Pod", "spec"), ("Pod", "spec", "schedulerName"),
    *[(*META, k) for k in ("name", "namespace", "uid", "creationTimestamp", "labels",
                           "annotations", "ownerReferences")],
    (*META, "labels", "specon.io/training"),
    *[(*META, "annotations", k) for k in POD["metadata"]["annotations"]],  # type: ignore[index]
    OWNER_AT, *[(*OWNER_AT, k) for k in OWNER],
    ("NodeNames",), ("NodeNames", 0), ("Nodes",), ("Nodes", "items"), ("Nodes", "items", 0),
    ("Nodes", "items", 0, "metadata"), ("Nodes", "items", 0, "metadata", "name"),
]
# Any JSON type (ints within int64: the decoder's range, so the value reaches the extender).
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
wrong = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)


def _has(doc: Any, key: Any) -> bool:
    return (isinstance(doc, dict) and isinstance(key, str)) or (
        isinstance(doc, list) and isinstance(key, int) and key < len(doc))


def put(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    """Set ``doc`` at ``path`` when its parent is there (an earlier change may have removed it)."""
    for key in path[:-1]:
        if not _has(doc, key) or (isinstance(doc, dict) and key not in doc):
            return
        doc = doc[key]
    if _has(doc, path[-1]):
        doc[path[-1]] = value


@st.composite
def extender_args(draw: st.DrawFn) -> dict[str, Any]:
    args = copy.deepcopy(draw(st.sampled_from([BY_NAMES, BY_NODES])))
    for path in draw(st.lists(st.sampled_from(PATHS), min_size=1, max_size=3)):
        put(args, path, draw(wrong))
    return args


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    state = ClusterState(stale_after_s=30)
    for key in ("job/job-uid", "migration/mig-1"):
        state.reserve(Reservation(key=key, migration_id="mig-1", target="node-2",
                                  source_node="node-1", pod="default/train-abc"))
    with serve(create_app(ManagerSettings(kubernetes=False), state=state)) as base:
        yield base


@pytest.mark.parametrize("kind", [["Job"], {"kind": "Job"}, 7, None])
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_an_owner_reference_kind_of_any_type_is_no_500(url: str, verb: str, kind: Any) -> None:
    args = copy.deepcopy(BY_NAMES)
    args["Pod"]["metadata"]["ownerReferences"][0]["kind"] = kind
    r = httpx.post(f"{url}/{verb}", json=args)
    if kind is None:  # absent: a pod of no known owner, placed as a bare pod
        assert r.status_code == 200, r.text
    else:
        assert r.status_code == 400, r.text
        assert "ownerReferences" in r.json()["detail"]


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(verb=st.sampled_from(["filter", "prioritize"]), args=extender_args())
def test_wrongly_typed_fields_the_extender_reads_are_never_a_5xx(url: str, verb: str,
                                                                 args: dict[str, Any]) -> None:
    r = httpx.post(f"{url}/{verb}", json=args)
    assert r.status_code in (200, 400), (r.status_code, r.text[:300], args)
    if r.status_code == 400:
        assert r.json()["detail"]
