"""A migration whose Job is suspended after the eviction (Kueue preempting or deactivating its
Workload) ends at once instead of holding its target and both nodes until the Job runs again.
The plane test ``test_kueue_plane.py::test_kueue_taking_the_quota_back_mid_migration_...``
shows it with the real Kueue."""

from __future__ import annotations

from typing import Any

import pytest

from specon_manager.migration import no_replacement_coming


def job(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j", "namespace": "n", "uid": "ju"}, "spec": spec}


def test_a_suspended_job_makes_no_pod_for_now_so_the_migration_ends_as_suspended() -> None:
    result, why = no_replacement_coming("Job", job(suspend=True)) or ("", "")
    assert result == "suspended" and "suspended" in why and "Kueue" in why


@pytest.mark.parametrize("owner", [job(), job(suspend=False), job(suspend="true")])
def test_a_running_job_is_waited_for(owner: dict[str, Any]) -> None:
    assert no_replacement_coming("Job", owner) is None


@pytest.mark.parametrize("kind", ["Job", "StatefulSet", "ReplicaSet"])
def test_a_deleted_owner_makes_none_ever(kind: str) -> None:
    assert no_replacement_coming(kind, None) == ("failed", f"the {kind} was deleted")


def test_only_a_job_is_judged_by_suspend() -> None:
    # a StatefulSet has no such field; a stray one is not a reason to give up on its pod
    assert no_replacement_coming("StatefulSet", {"spec": {"suspend": True, "replicas": 1}}) is None
