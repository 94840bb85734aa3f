"""Which pods the manager may move: a Job whose pod the eviction would fail is refused (issue 15:
a Job with ``backoffLimit: 0`` and no podFailurePolicy was accepted, and the eviction failed the
whole Job). The plane test ``test_pods_that_did_not_opt_in_or_cannot_be_recreated_are_never_moved``
shows the same refusal through the real API server."""

from __future__ import annotations

from typing import Any

import pytest

from specon_manager.migration import ignores_disruption, why_not_movable

IGNORE = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def pod() -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "n", "uid": "u", "labels": {
        "specon.io/migratable": "true"}, "ownerReferences": [
        {"kind": "Job", "name": "j", "uid": "ju", "controller": True}]},
        "status": {"phase": "Running"}}


def job(**spec: Any) -> dict[str, Any]:
    failed = spec.pop("failed", 0)
    return {"metadata": {"name": "j", "namespace": "n", "uid": "ju"},
            "spec": {"podReplacementPolicy": "Failed", **spec}, "status": {"failed": failed}}


@pytest.mark.parametrize(("spec", "refused"), [
    ({"backoffLimit": 0}, True),
    ({"backoffLimit": 2, "failed": 2}, True),
    ({"backoffLimit": 2, "failed": 1}, False),
    ({}, False),  # the default backoffLimit, 6
    ({"backoffLimit": 0, "podFailurePolicy": IGNORE}, False),
    ({"backoffLimit": 0, "podFailurePolicy": {"rules": [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]}}, True),
    ({"backoffLimit": 0, "podFailurePolicy": {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget",
                                                  "status": "False"}]}]}}, True),
    ({"backoffLimit": "0"}, True),  # not a number: not trusted
])
def test_a_job_the_eviction_would_fail_is_not_moved(spec: dict[str, Any], refused: bool) -> None:
    why = why_not_movable(pod(), job(**spec), "converged")
    assert (why is not None and "would fail its Job" in why) == refused, why


@pytest.mark.parametrize("policy", [None, "x", {"rules": "x"}, {"rules": [1, {"action": 2}]},
                                    {"rules": [{"action": "Ignore", "onPodConditions": "x"}]}])
def test_malformed_failure_policies_ignore_nothing(policy: Any) -> None:
    assert ignores_disruption(policy) is False
