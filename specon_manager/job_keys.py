"""The keys the manager files pods and jobs under: a pod's ``namespace/name``, the job a pod
runs (its controlling owner, else the pod), the key of a migration's reservation, and the
opt-in rule for training pods. Pure functions of the pod's metadata."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specon import names
from specon.wire import LABEL_TRAINING
from specon_manager.kube import OWNERS

#: Annotation on a bare replacement pod naming the migration it belongs to.
ANNOTATION_MIGRATION_ID = names.ANNOTATION_MIGRATION_ID


def pod_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def kind_key(namespace: str, kind: str) -> str:
    """A job kind within its namespace (specon.kinds): a pod is placed by the jobs of its own
    namespace only, so what one tenant's pods report never steers another's placement."""
    return f"{namespace}/{kind}"


def job_key(pod: Mapping[str, Any]) -> str:
    """The identity of the job a pod runs: its controlling Job, StatefulSet or ReplicaSet, else
    the pod itself.

    An owned pod's replacement has the same owner (a Job's and a ReplicaSet's a new name, a
    StatefulSet's the same name); a bare pod's replacement carries
    the migration id of the pod it replaces (see :func:`reservation_key`)."""
    meta = pod.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") in OWNERS:
            return f"job/{ref.get('uid', '')}"
    return f"pod/{meta.get('namespace', '')}/{meta.get('name', '')}"


def reservation_key(pod: Mapping[str, Any]) -> str:
    """The key under which a reservation for this (replacement) pod is held."""
    meta = pod.get("metadata") or {}
    mig = (meta.get("annotations") or {}).get(ANNOTATION_MIGRATION_ID)
    key = job_key(pod)
    if key.startswith("pod/") and mig:
        return f"migration/{mig}"
    return key


def is_training_pod(pod: Mapping[str, Any], scheduler_name: str) -> bool:
    """The agent's opt-in rule (specon.names.opted_in): the training label or annotation, or
    the SpeCon scheduler."""
    return names.opted_in(pod, LABEL_TRAINING, scheduler_name)
