"""The evicting phase: after a verified checkpoint, write the record that outlives the source
pod (on its owner, or as a bare pod's gated replacement pinned to the target), then evict the
source; rolled back instead when the user deleted the job, the target became unfit or the
phase timed out, and when a PodDisruptionBudget refuses the eviction."""

from __future__ import annotations

from dataclasses import replace

from specon_manager.kube import KubeError, meta, pod_path
from specon_manager.migration.context import PhaseContext
from specon_manager.migration.end import cancel, cancel_deleted
from specon_manager.migration.pod_spec import pinned, with_cpu_limit
from specon_manager.migration.recheck import target_unfit, why_deleted
from specon_manager.migration.record import (
    A_MIGRATED,
    A_MIGRATED_AT,
    A_MIGRATION,
    A_MOVE_COST,
    A_REBALANCED,
    GATE,
    L_MIGRATING,
    Migration,
)
from specon_manager.state import ANNOTATION_MIGRATION_ID


def evict(ctx: PhaseContext, m: Migration, now: float) -> Migration | None:
    """Phase evicting: the migration in phase placing once its source was evicted (the
    dispatcher goes on with it in the same pass), or None (ended, or tried again)."""
    pod = ctx.kube.get(pod_path(m.namespace, m.pod))
    going = pod is None or meta(pod).get("uid") != m.pod_uid or bool(
        meta(pod).get("deletionTimestamp"))
    # A source going after this run sent its eviction (the answer lost) is its doing.
    ours = going and m.id in ctx.evictions_sent
    deleted = why_deleted(ctx, m, pod, pod_too=not ours)
    if deleted is not None:
        cancel_deleted(ctx, m, deleted)
        return None
    if not ours:
        # Nothing evicted yet: an unfit target or the phase's deadline ends the move here,
        # with what this phase recorded undone (issue 32).
        assert pod is not None
        why = target_unfit(ctx, m, pod) or (
            f"not evicted within {ctx.settings.placement_timeout_s:.0f} s"
            if now > m.deadline else None)
        if why is not None:
            roll_back(ctx, m, why)
            return None
    placing = replace(m, phase="placing", deadline=now + ctx.settings.placement_timeout_s)
    marker = A_REBALANCED if m.reason == "rebalance" else A_MIGRATED
    # The record that outlives the pod comes first.
    if m.owned:
        ctx.kube.patch(m.owner_path(), {"metadata": {
            "uid": m.owner_uid, "labels": {L_MIGRATING: "true"},
            "annotations": {A_MIGRATION: placing.record(), marker: m.id,
                            A_MIGRATED_AT: f"{now:.3f}"}}})
    else:
        placing = replace(placing, replacement=ctx.replacement_name(m))
        create_replacement(ctx, placing, marker, now)
    ctx.hook("evicting-recorded")
    resent = m.id in ctx.evictions_sent  # sent in an earlier pass, its answer lost
    ctx.evictions_sent.add(m.id)
    evicted = request_eviction(ctx, m, placing, ours_if_gone=resent)
    ctx.evictions_sent.discard(m.id)
    if not evicted:
        return None
    placing = ctx.set(placing)
    ctx.hook("placing")
    return placing


def request_eviction(ctx: PhaseContext, m: Migration, placing: Migration, *,
                     ours_if_gone: bool) -> bool:
    """Evict the source pod (its record in phase placing is already written); False when
    the eviction is refused, and the migration then rolled back, or, unless
    ``ours_if_gone``, when the source was deleted by someone else first (the eviction answers
    404 or 409). ``ours_if_gone``: a source gone by now is taken for this migration's doing
    (its eviction sent before, the answer lost; or phase placing, which goes on without it)."""
    try:
        ctx.kube.create(pod_path(m.namespace, m.pod) + "/eviction", {
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": m.pod, "namespace": m.namespace},
            "deleteOptions": {"preconditions": {"uid": m.pod_uid}}})
    except KubeError as exc:
        # 404: gone already; 409: the UID precondition failed, so the pod by that UID is
        # gone too (a namesake took the name).
        if exc.status == 429:  # a PodDisruptionBudget says no
            undo_record(ctx, placing)
            cancel(ctx, m, f"eviction refused: {exc}")
            return False
        if exc.status not in (404, 409):
            raise
        if not ours_if_gone:
            # Gone between the look before and this eviction, by someone else's delete (the
            # fault campaign's user deleted j0013 there, and its replacement ran): what
            # Kubernetes would do without SpeCon stands, as after a restart (evict()).
            cancel_deleted(ctx, placing, "the source pod was deleted before its eviction")
            return False
    ctx.state.withdraw_checkpoint(m.source, m.namespace, m.pod)
    ctx.event(ctx.pod_ref(m), "MigrationEvicted",
              f"migration {m.id}: evicted after a verified checkpoint; the replacement "
              f"goes to {m.target}")
    return True


def create_replacement(ctx: PhaseContext, m: Migration, marker: str, now: float) -> None:
    src = ctx.kube.get(pod_path(m.namespace, m.pod))
    if src is None or meta(src).get("uid") != m.pod_uid:
        if ctx.kube.get(pod_path(m.namespace, m.replacement)) is not None:
            return  # made before a restart
        raise KubeError(410, "Gone", "the source pod vanished before its replacement was "
                                     "created")
    md = meta(src)
    ann = {k: v for k, v in (md.get("annotations") or {}).items()
           if not k.startswith("specon.io/") or k == A_MOVE_COST}
    ann.update({A_MIGRATION: m.record(), ANNOTATION_MIGRATION_ID: m.id, marker: m.id,
                A_MIGRATED_AT: f"{now:.3f}"})
    spec = pinned(src["spec"], m.target)
    spec.pop("nodeName", None)
    spec["schedulingGates"] = [{"name": GATE}]
    # The source's spec holds the limit its agent set (resize actuator): the copy gets the
    # owner's, as the source's agent last reported it, else as recorded when the move
    # started (the fault campaign found moved jobs keeping the agent's limit for good).
    rep = ctx.state.job_on(m.source, m.namespace, m.pod, m.pod_uid)
    if rep is not None and rep.owner_limit_cores is not None:
        with_cpu_limit(spec, rep.container, rep.owner_limit_cores)
    elif m.owner_cpu_limit is not None and m.owner_cpu_container:
        with_cpu_limit(spec, m.owner_cpu_container, m.owner_cpu_limit)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": m.replacement, "namespace": m.namespace,
        "labels": {**(md.get("labels") or {}), L_MIGRATING: "true"}, "annotations": ann},
        "spec": spec}
    try:
        ctx.kube.create(pod_path(m.namespace), body)
    except KubeError as exc:
        if exc.status != 409:
            raise


def undo_record(ctx: PhaseContext, m: Migration) -> None:
    if m.owned:
        ctx.kube.patch(m.owner_path(), {"metadata": {
            "labels": {L_MIGRATING: None},
            "annotations": {A_MIGRATION: None, A_MIGRATED: None, A_REBALANCED: None}}})
    else:
        # Still gated: it never ran.
        ctx.kube.delete(pod_path(m.namespace, m.replacement))


def undo_evicting(ctx: PhaseContext, m: Migration) -> None:
    """Undo what the evicting phase may have recorded before its eviction (the owner's
    record, or a bare pod's gated replacement, which never ran)."""
    try:
        undo_record(ctx, replace(m, replacement=m.replacement or ctx.replacement_name(m)))
    except KubeError as exc:
        if exc.status not in (404, 409, 422):
            raise


def roll_back(ctx: PhaseContext, m: Migration, why: str) -> None:
    """Cancel ``m``, not yet evicted, with what the evicting phase may have recorded undone:
    the job keeps running where it is."""
    undo_evicting(ctx, m)
    cancel(ctx, m, why)
