"""A migration target must be a node the job's new pod can run on: its ``nodeSelector`` and
required node affinity (what a Kueue ResourceFlavor adds to an admitted Job's pods) are judged
as Kubernetes' NodeAffinity filter does. The plane test
``test_kueue_plane.py::...[not-the-best-target]`` shows the manager choosing by it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specon_manager.migration import fits, pinned


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


def test_a_node_selector_needs_every_label_with_its_value() -> None:
    # what Kueue's ResourceFlavor nodeLabels become in the admitted Job's pod template
    spec = {"nodeSelector": {"pool": "spot", "zone": "a"}}
    assert fits(spec, node("w1", pool="spot", zone="a", other="x"))
    assert not fits(spec, node("w2", pool="spot"))
    assert not fits(spec, node("w3", pool="on-demand", zone="a"))
    assert fits({}, node("w4"))  # no constraint: any node


@pytest.mark.parametrize(("requirement", "labels", "expected"), [
    (expr("pool", "In", "a", "b"), {"pool": "b"}, True),
    (expr("pool", "In", "a", "b"), {"pool": "c"}, False),
    (expr("pool", "In", "a"), {}, False),
    (expr("pool", "NotIn", "a"), {"pool": "b"}, True),
    (expr("pool", "NotIn", "a"), {}, True),
    (expr("pool", "NotIn", "a"), {"pool": "a"}, False),
    (expr("gpu", "Exists"), {"gpu": ""}, True),
    (expr("gpu", "Exists"), {}, False),
    (expr("gpu", "DoesNotExist"), {}, True),
    (expr("gpu", "DoesNotExist"), {"gpu": "1"}, False),
    (expr("cores", "Gt", "8"), {"cores": "16"}, True),
    (expr("cores", "Gt", "8"), {"cores": "8"}, False),
    (expr("cores", "Lt", "8"), {"cores": "4"}, True),
    (expr("cores", "Lt", "8"), {"cores": "many"}, False),
    (expr("cores", "Lt", "8"), {}, False),
    (expr("pool", "Unknown", "a"), {"pool": "a"}, False),
])
def test_each_operator_as_kubernetes_reads_it(requirement: dict[str, Any],
                                              labels: dict[str, str], expected: bool) -> None:
    assert fits(required({"matchExpressions": [requirement]}), node("w", **labels)) is expected


def test_terms_are_ored_their_requirements_anded_and_an_empty_term_matches_nothing() -> None:
    spec = required({"matchExpressions": [expr("pool", "In", "a"), expr("zone", "In", "x")]},
                    {"matchExpressions": [expr("pool", "In", "b")]})
    assert fits(spec, node("w1", pool="a", zone="x"))
    assert not fits(spec, node("w2", pool="a", zone="y"))
    assert fits(spec, node("w3", pool="b"))
    assert not fits(required({}), node("w4", pool="a"))
    # the selector and the affinity must both hold
    both = {**spec, "nodeSelector": {"tier": "gold"}}
    assert not fits(both, node("w5", pool="b"))
    assert fits(both, node("w6", pool="b", tier="gold"))


def test_match_fields_name_the_node() -> None:
    spec = required({"matchFields": [expr("metadata.name", "NotIn", "w1")]})
    assert not fits(spec, node("w1"))
    assert fits(spec, node("w2"))


NAMES = st.sampled_from(["w1", "w2", "w3"])
LABELS = st.dictionaries(st.sampled_from(["pool", "zone"]), st.sampled_from(["a", "b"]),
                         max_size=2)


@given(selector=LABELS, labels=LABELS, target=NAMES, name=NAMES)
def test_a_pinned_copy_fits_only_its_target_and_only_if_the_pod_fit_there(
    selector: dict[str, str], labels: dict[str, str], target: str, name: str,
) -> None:
    """The manager's pin (a bare pod's replacement) narrows the pod's own constraints to the
    target, never widens them: the copy fits a node iff it is the target and the pod fits it."""
    spec = {"nodeSelector": selector} if selector else {}
    n = node(name, **labels)
    assert fits(pinned(spec, target), n) == (name == target and fits(spec, n))
