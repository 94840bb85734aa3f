"""The pin that holds a bare pod's replacement to its migration target (node affinity on the
node's name) is added to every existing term and removed exactly."""

from __future__ import annotations

from typing import Any

import pytest

from specon_manager.migration import pinned, unpinned

PIN = {"key": "metadata.name", "operator": "In", "values": ["w2"]}
ZONE = {"key": "zone", "operator": "In", "values": ["a"]}
GPU = {"key": "gpu", "operator": "Exists"}


def required_terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    terms: list[dict[str, Any]] = spec["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return terms


SPECS: list[dict[str, Any]] = [
    {"containers": [{"name": "main"}]},
    {"containers": [], "affinity": {"podAntiAffinity": {"x": 1}}},
    {"containers": [], "affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}}},
    {"containers": [], "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [ZONE]}, {"matchExpressions": [GPU],
                                           "matchFields": [{"key": "metadata.name",
                                                            "operator": "NotIn",
                                                            "values": ["w9"]}]}]}}}},
]


@pytest.mark.parametrize("spec", SPECS)
def test_every_term_requires_the_target_and_unpinning_restores_the_spec(
    spec: dict[str, Any]
) -> None:
    out = pinned(spec, "w2")
    terms = required_terms(out)
    assert terms and all(PIN in t["matchFields"] for t in terms)
    # the pod's own requirements are still there, ANDed with the pin in each term
    before = spec.get("affinity", {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    if before:
        for old, new in zip(before, terms, strict=True):
            assert new.get("matchExpressions") == old.get("matchExpressions")
    else:
        assert terms == [{"matchFields": [PIN]}]
    assert unpinned(out, "w2") == spec
    assert "affinity" not in spec or spec["affinity"] != out["affinity"]  # input untouched
