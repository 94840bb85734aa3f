"""Why a pod may not be migrated, by its owner's kind (bare, Job, JobSet, StatefulSet,
ReplicaSet, PyTorchJob): only owners that never start a second pod while the first one
terminates, and that the eviction cannot fail."""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from specon.names import migratable
from specon.wire import LABEL_MIGRATABLE
from specon_manager.kube import (
    OWNERS,
    PARENTS,
    Kube,
    annotations_of,
    controller_ref,
    labels_of,
    meta,
    owner_path,
)
from specon_manager.migration.record import A_MIGRATED, A_REBALANCED

#: Why a pod may not move now but may later (or is about to go): its worker asks again.
ENDING = ("the pod is terminating", "the pod is not running")


def is_ending(why: str | None) -> bool:
    """The pod is going away (terminating, ended, its owner gone): refused, not marked."""
    return why is not None and (why in ENDING or (
        why.startswith("the pod's ") and why.endswith(" is gone")))


def why_not_movable(pod: dict[str, Any], job: dict[str, Any] | None, reason: str,
                    replicasets: bool = False, parent: dict[str, Any] | None = None,
                    ) -> str | None:
    """None when this pod may be migrated, else why not (a sentence for events and replies;
    :func:`is_ending` when the pod is going away). ``job`` is the pod's controller (a Job,
    StatefulSet, ReplicaSet or PyTorchJob) when it has one, ``parent`` that controller's own
    (:func:`parent_of`: a Job's JobSet); ``replicasets``: ReplicaSet pods may move (only with
    a non-ignorable extender)."""
    md = meta(pod)
    if md.get("deletionTimestamp"):
        return ENDING[0]
    if (pod.get("status") or {}).get("phase") != "Running":
        return ENDING[1]
    if not migratable(labels_of(pod)):
        return f"the pod did not opt in to migration (label {LABEL_MIGRATABLE}=true)"
    ref = controller_ref(pod)
    holder = pod
    if ref is not None:
        kind = ref.get("kind")
        if kind not in OWNERS:
            return (f"the pod is owned by a {kind}, which the manager cannot rely on (it moves "
                    "bare pods and pods of a Job, a JobSet, a StatefulSet, a ReplicaSet or a "
                    "PyTorchJob)")
        if job is None:
            return f"the pod's {kind} is gone"
        if kind == "Job":
            why = _why_not_job(job)
        elif kind == "PyTorchJob":
            why = _why_not_pytorchjob(job)
        else:
            why = _why_not_replicated(job, kind, replicasets)
        if why is not None:
            return why
        above = controller_ref(job)
        if above is not None and above.get("kind") in PARENTS:
            if parent is None:
                return f"the pod's {above['kind']} is gone"
            why = _why_not_jobset(parent)
            if why is not None:
                return why
        holder = job
    marker = A_REBALANCED if reason == "rebalance" else A_MIGRATED
    if reason != "progress" and annotations_of(holder).get(marker):
        return "the job was already " + ("rebalanced" if reason == "rebalance" else "migrated")
    return None


def _why_not_job(job: dict[str, Any]) -> str | None:
    spec = job.get("spec") or {}
    if spec.get("podReplacementPolicy") != "Failed":
        return ("its Job does not set podReplacementPolicy: Failed (a replacement could "
                "start while the pod terminates)")
    if not ignores_disruption(spec.get("podFailurePolicy")):
        # The evicted pod ends Failed; without a rule ignoring DisruptionTarget it counts
        # against backoffLimit, and past it the Job fails with its job (issue 15).
        limit = spec.get("backoffLimit", 6)
        failed = (job.get("status") or {}).get("failed") or 0
        if not isinstance(limit, int) or not isinstance(failed, int) or failed + 1 > limit:
            return (f"the eviction would fail its Job (backoffLimit {limit}, {failed} failed "
                    "so far, and no podFailurePolicy rule ignores DisruptionTarget)")
    return None


def _why_not_replicated(owner: dict[str, Any], kind: str, replicasets: bool) -> str | None:
    """A StatefulSet's or ReplicaSet's pod may move when the owner has one replica (its pods
    share the template's checkpoint folder) and, for a ReplicaSet, when the manager was told
    that the scheduler's extender is not ignorable: a ReplicaSet makes the new pod as soon as
    the old one terminates, so only the extender's hold keeps it from running beside the old
    one while that one saves. A StatefulSet makes it only once the old pod is gone."""
    replicas = (owner.get("spec") or {}).get("replicas", 1)
    if replicas != 1:
        return (f"its {kind} has {replicas} replicas, whose pods share one checkpoint folder; "
                "only single-replica ones are moved")
    if kind == "ReplicaSet" and not replicasets:
        return ("a ReplicaSet (Deployment) starts the new pod as soon as the old one "
                "terminates; only a non-ignorable extender holds it until the old one has "
                "saved, so its pods move only with migrate_replicaset_pods (docs/manager.md)")
    return None


#: What the Kubeflow Training Operator does with a replica's Failed pod, by the replica's
#: restartPolicy (v1.8.1, pkg/controller.v1/common/pod.go ``ReconcilePods``): OnFailure and
#: Always delete it and recreate the same name; ExitCode does so for an exit code of 128 or
#: more (SIGTERM's 143: the training contract's exit), and fails the job for any other.
PYTORCH_RESTARTS = ("OnFailure", "Always", "ExitCode")


def _why_not_pytorchjob(job: dict[str, Any]) -> str | None:
    """A PyTorchJob's pod may move when the job has a single replica (the training operator
    then recreates the evicted pod under the same name, once the old one is gone, like a
    StatefulSet) and nothing turns the eviction into the job's failure. On a real node the
    evicted pod ends Failed (exit 143) before it is removed, and the operator sees it; it
    counts a terminating pod as a failed replica already (tests/manager/test_kubeflow_plane.py
    shows a ``Never`` job failed by an eviction)."""
    spec = job.get("spec") or {}
    replicas = spec.get("pytorchReplicaSpecs") or {}
    counts = {rtype: (rs or {}).get("replicas", 1) for rtype, rs in replicas.items()}
    if not all(isinstance(n, int) for n in counts.values()) or sum(counts.values()) != 1:
        shape = ", ".join(f"{n} {rtype}" for rtype, n in counts.items()) or "no replicas"
        return (f"its PyTorchJob has {shape}: its replicas train together (one rendezvous), so "
                "moving one would stop the others; only single-replica PyTorchJobs are moved")
    rtype = next(rt for rt, n in counts.items() if n == 1)
    policy = (replicas[rtype] or {}).get("restartPolicy", "OnFailure")  # the operator's default
    if policy not in PYTORCH_RESTARTS:
        return (f"its PyTorchJob's {rtype} has restartPolicy {policy}: the training operator "
                "fails the whole job as soon as the evicted pod terminates (OnFailure, Always "
                "and ExitCode recreate it)")
    limit = (spec.get("runPolicy") or {}).get("backoffLimit")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        return (f"the eviction would fail its PyTorchJob (runPolicy.backoffLimit {limit}: the "
                "training operator counts the evicted pod's failure as a retry past it)")
    return None


def _why_not_jobset(jobset: dict[str, Any]) -> str | None:
    """A JobSet's pod moves through its Job (the Job's own rules hold, so the Job does not
    fail and the JobSet's failurePolicy, which acts only on a failed Job, never restarts the
    set); the set must run a single pod, since its pods train together."""
    total = 0
    for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or ():
        replicas = (rjob or {}).get("replicas", 1)
        template = (rjob or {}).get("template") or {}
        parallelism = (template.get("spec") or {}).get("parallelism", 1)
        if not isinstance(replicas, int) or not isinstance(parallelism, int):
            return "its JobSet's replicatedJobs are not plain counts"
        total += replicas * parallelism
    if total != 1:
        return (f"its JobSet runs {total} pods, which train together (moving one would stop "
                "the others); only single-pod JobSets are moved")
    return None


def owner_of(kube: Kube, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's controller if it is one the manager may rely on (:data:`OWNERS`) and still
    the one the pod names (same UID); else None."""
    return _controller_of(kube, pod, OWNERS)


def parent_of(kube: Kube, owner: dict[str, Any] | None) -> dict[str, Any] | None:
    """The controller of the pod's owner when its shape decides too (:data:`PARENTS`: a Job's
    JobSet) and it is still the one the owner names; else None."""
    return None if owner is None else _controller_of(kube, owner, PARENTS)


def _controller_of(kube: Kube, obj: dict[str, Any], kinds: Container[str],
                   ) -> dict[str, Any] | None:
    """``obj``'s controller when its kind is one of ``kinds`` and it is still the one ``obj``
    names (same UID), with its ``kind`` set; else None."""
    ref = controller_ref(obj)
    if ref is None or ref.get("kind") not in kinds:
        return None
    found = kube.get(owner_path(ref["kind"], meta(obj)["namespace"], ref["name"]))
    if found is None or meta(found).get("uid") != ref.get("uid"):
        return None
    found.setdefault("kind", ref["kind"])
    return found


def ignores_disruption(policy: Any) -> bool:
    """Whether a Job's podFailurePolicy ignores pods failed by a disruption (an eviction): a
    rule ``action: Ignore`` on the condition ``DisruptionTarget`` (status True, the default)."""
    rules = policy.get("rules") if isinstance(policy, dict) else None
    for rule in rules if isinstance(rules, list) else ():
        if not isinstance(rule, dict) or rule.get("action") != "Ignore":
            continue
        conds = rule.get("onPodConditions")
        for cond in conds if isinstance(conds, list) else ():
            if isinstance(cond, dict) and cond.get("type") == "DisruptionTarget" and (
                    cond.get("status", "True") == "True"):
                return True
    return False


