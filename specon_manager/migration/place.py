"""The placing phase: once the evicted source is gone, see the job's new pod bound (a bare
pod's replacement ungated; a Job's or other owner's new pod found by its owner's UID), on the
reserved target or, past the placement timeout, wherever the scheduler puts it. A source that
stays terminating is waited for (never two copies of a job) and reported once."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specon import rfc3339
from specon_manager.kube import KubeError, controller_ref, meta, pod_path
from specon_manager.migration.context import PhaseContext, log
from specon_manager.migration.end import cancel_deleted, finish
from specon_manager.migration.evict import request_eviction, roll_back
from specon_manager.migration.pod_spec import unpinned
from specon_manager.migration.recheck import node_state, target_unfit, why_deleted
from specon_manager.migration.record import A_MIGRATION, A_SOURCE_GONE, GATE, Migration


def no_replacement_coming(kind: str, owner: dict[str, Any] | None) -> tuple[str, str] | None:
    """For a migration whose source is gone and whose owner has made no new pod yet: (result,
    why) when none will come for now, else None (wait for it). A deleted owner makes none. A
    suspended Job makes none until it runs again: Kueue suspends a Job when it preempts or
    deactivates its Workload, maybe for hours; waiting would hold the target's reservation and
    both nodes' migration slots all that time, and the job resumes from its checkpoint
    wherever its next pod goes."""
    if owner is None:
        return "failed", f"the {kind} was deleted"
    if kind == "Job" and (owner.get("spec") or {}).get("suspend") is True:
        return "suspended", ("its Job was suspended before its next pod was made (by Kueue, if "
                             "it preempted or deactivated the Job's Workload); the job resumes "
                             "from its last checkpoint when the Job runs again")
    return None


def place(ctx: PhaseContext, m: Migration, now: float) -> None:
    """Phase placing: see the job's new pod bound once its source is gone (or send the
    eviction that a stopped manager did not)."""
    if m.owned:
        # Its owner deleted: whatever pod it made goes with it; nothing is recreated.
        deleted = why_deleted(ctx, m, None, pod_too=False)
        if deleted is not None:
            cancel_deleted(ctx, m, deleted)
            return
    src = ctx.kube.get(pod_path(m.namespace, m.pod))
    if src is not None and meta(src).get("uid") == m.pod_uid:
        if not meta(src).get("deletionTimestamp"):
            # Recorded as placing, but the eviction was never sent (the manager stopped in
            # between): send it now, to a target still fit. The checkpoint was verified
            # before the record.
            unfit = target_unfit(ctx, m, src) if m.reserved else None
            if unfit is not None:
                roll_back(ctx, m, unfit)
                return
            # A source gone meanwhile is placing's to go on without, as below.
            request_eviction(ctx, m, m, ours_if_gone=True)
        else:
            source_stuck(ctx, m, src, now)
        return
    ctx.state.source_gone(m.key)
    if m.kind == "pod":
        place_bare(ctx, m, now)
        return
    selector = {"labelSelector": f"batch.kubernetes.io/controller-uid={m.owner_uid}"} if (
        m.kind == "job") else {}
    candidates = [p for p in ctx.kube.list(pod_path(m.namespace), **selector)
                  if (controller_ref(p) or {}).get("uid") == m.owner_uid
                  and meta(p).get("uid") != m.pod_uid and not meta(p).get("deletionTimestamp")]
    if not candidates:
        ended = no_replacement_coming(m.owner_kind, ctx.kube.get(m.owner_path()))
        if ended is not None:
            finish(ctx, m, None, ended[1], result=ended[0])
            return
    bound = [p for p in candidates if (p.get("spec") or {}).get("nodeName")]
    if bound:
        finish(ctx, m, bound[0], "")
        return
    retry_scheduling(ctx, m, candidates)
    if m.reserved and now > m.deadline:
        # The target cannot take it: let the scheduler place it anywhere (never lost).
        lifted = ctx.set(m, reserved=False, deadline=now + ctx.settings.placement_timeout_s)
        ctx.kube.patch(m.owner_path(), {"metadata": {
            "uid": m.owner_uid, "annotations": {A_MIGRATION: lifted.record()}}})
        ctx.state.release(m.key)
        ctx.hook("lifted")
        announce_lifted(ctx, m)
    elif not m.reserved and now > m.deadline:
        finish(ctx, m, None, unplaced(ctx), result="failed")


def retry_scheduling(ctx: PhaseContext, m: Migration, pending: list[dict[str, Any]]) -> None:
    """Mark each of the owner's new pods still pending, once, now that the source is gone
    (ANNOTATION_SOURCE_GONE): the update has kube-scheduler try it again at once. An owner
    that makes its new pod while the source terminates (a ReplicaSet, a Job) has it turned
    away by the extender's filter ("waiting for the pod it replaces to terminate"), and the
    scheduler retries a pod an extender refused only on some cluster event or after five
    minutes: the source's deletion is one, but it can reach the scheduler before the manager
    has seen it, and the retry is refused again (seen in the plane tests, hidden while the
    test plane's nodes were briefly tainted about once a minute)."""
    for p in pending:
        md = meta(p)
        if (md.get("annotations") or {}).get(A_SOURCE_GONE) == m.id:
            continue
        try:
            ctx.kube.patch(pod_path(m.namespace, str(md.get("name"))), {"metadata": {
                "uid": md.get("uid"), "annotations": {A_SOURCE_GONE: m.id}}})
        except KubeError as exc:  # gone or changed meanwhile: the next tick looks again
            log.info("migration %s: could not mark %s/%s for a new scheduling try: %s",
                     m.id, m.namespace, md.get("name"), exc)


def unplaced(ctx: PhaseContext) -> str:
    return (f"the new pod was not placed within {ctx.settings.placement_timeout_s:.0f} s "
            "of the reservation's lifting either; it stays pending and the scheduler "
            "places it wherever a node fits (the migration ends here)")


def source_stuck(ctx: PhaseContext, m: Migration, src: dict[str, Any], now: float) -> None:
    """The evicted source is still terminating: the replacement waits for it, so that the
    job never runs twice. Past its grace period plus ``source_stuck_after_s`` (its node
    dead or cut off, a finalizer), say so once, with the way out, instead of waiting in
    silence: Kubernetes removes the pod when its node is deleted or tainted
    ``node.kubernetes.io/out-of-service``, and the job then resumes on the target."""
    if m.id in ctx.stuck_reported:
        return
    try:
        ends = rfc3339.parse(str(meta(src)["deletionTimestamp"]))
    except (KeyError, ValueError):
        return
    if now < ends + ctx.settings.source_stuck_after_s:
        return
    ctx.stuck_reported.add(m.id)
    node = (src.get("spec") or {}).get("nodeName") or m.source
    state = node_state(ctx.kube.get(f"/api/v1/nodes/{node}"))
    ctx.metrics.migrations_stuck.inc()
    since = rfc3339.seconds(ends)
    ctx.event(ctx.pod_ref(m), "MigrationSourceStuck",
              f"migration {m.id}: the evicted pod is still terminating (grace period "
              f"ended {since}; node {node} is {state}); its replacement waits for it so "
              f"that the job never runs twice. If the node is dead, delete its Node "
              f"object or taint it node.kubernetes.io/out-of-service=nodeshutdown:"
              f"NoExecute; Kubernetes then removes the pod and the job resumes on "
              f"{m.target} from its verified checkpoint. A finalizer on the pod holds "
              f"it the same way.", warning=True)
    log.warning("migration %s: source %s/%s still terminating on %s (%s)", m.id,
                m.namespace, m.pod, node, state)


def place_bare(ctx: PhaseContext, m: Migration, now: float) -> None:
    """A bare pod's replacement, once the source is gone: ungate it and see it bound."""
    pinned_name = ctx.replacement_name(m)
    if m.replacement != pinned_name:
        # Lifted: the pinned replacement goes before its unpinned copy may run.
        old = ctx.kube.get(pod_path(m.namespace, pinned_name))
        if old is not None:
            if (old.get("spec") or {}).get("nodeName"):
                # It was placed after all: keep it; the copy is still gated (never ran).
                ctx.kube.delete(pod_path(m.namespace, m.replacement))
                finish(ctx, ctx.set(m, replacement=pinned_name), old, "")
                return
            # The resourceVersion precondition fails (409) if it was bound meanwhile.
            ctx.kube.delete(pod_path(m.namespace, pinned_name), {"preconditions": {
                "uid": meta(old).get("uid"),
                "resourceVersion": meta(old).get("resourceVersion")}})
            return
    rep = ctx.kube.get(pod_path(m.namespace, m.replacement))
    if rep is None or meta(rep).get("deletionTimestamp"):
        # Its user deleted the job where it now is: it is not made again.
        cancel_deleted(ctx, m, f"its replacement pod {m.replacement} was deleted")
        return
    gated = bool((rep.get("spec") or {}).get("schedulingGates"))
    if gated:
        ctx.kube.patch(pod_path(m.namespace, m.replacement),
                       {"spec": {"schedulingGates": None}})
        ctx.hook("ungated")
    if (rep.get("spec") or {}).get("nodeName"):
        finish(ctx, m, rep, "")
    elif m.reserved and now > m.deadline:
        lift_bare(ctx, m, rep, now)
    elif not m.reserved and not gated and now > m.deadline:
        finish(ctx, m, None, unplaced(ctx), result="failed")


def lift_bare(ctx: PhaseContext, m: Migration, rep: dict[str, Any], now: float) -> None:
    """The pinned replacement was not placed in time: make an unpinned copy, gated. The
    pinned one is deleted (if still unbound) before the copy is ungated, in :func:`place_bare`."""
    lifted = replace(m, replacement=ctx.replacement_name(m) + "-u", reserved=False,
                     deadline=now + ctx.settings.placement_timeout_s)
    md = meta(rep)
    ann = dict(md.get("annotations") or {})
    ann[A_MIGRATION] = lifted.record()
    spec = unpinned(rep["spec"], m.target)
    spec.pop("nodeName", None)
    spec["schedulingGates"] = [{"name": GATE}]
    try:
        ctx.kube.create(pod_path(m.namespace), {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": lifted.replacement, "namespace": m.namespace,
                         "labels": dict(md.get("labels") or {}), "annotations": ann},
            "spec": spec})
    except KubeError as exc:
        if exc.status != 409:
            raise
    ctx.state.release(m.key)
    ctx.set(lifted)
    ctx.hook("lifted")
    announce_lifted(ctx, m)


def announce_lifted(ctx: PhaseContext, m: Migration) -> None:
    ctx.event(ctx.pod_ref(m), "MigrationReservationLifted",
              f"migration {m.id}: not placed on {m.target} within "
              f"{ctx.settings.placement_timeout_s:.0f} s; placing it anywhere",
              warning=True)
