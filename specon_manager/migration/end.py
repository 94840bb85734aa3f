"""The end of a migration: done (its replacement placed, or none coming) or cancelled (the job
stays where it is, or its user deleted it and nothing is recreated)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specon_manager.kube import KubeError, meta, pod_path
from specon_manager.migration.context import PhaseContext, log
from specon_manager.migration.cost import MEASURE_WITHIN_S
from specon_manager.migration.record import (
    A_MIGRATED,
    A_MIGRATION,
    A_REBALANCED,
    L_MIGRATING,
    Migration,
)


def finish(ctx: PhaseContext, m: Migration, placed: dict[str, Any] | None, problem: str,
           result: str = "") -> None:
    """End ``m``: its replacement ``placed`` (None: none, because of ``problem``).
    ``result`` (the metric's label) is worked out unless given."""
    ctx.state.release(m.key)
    ctx.migrations.pop(m.id, None)
    ctx.stuck_reported.discard(m.id)
    node = (placed or {}).get("spec", {}).get("nodeName")
    done = replace(m, phase="done")
    holder = m.owner_path() if m.owned else pod_path(m.namespace, m.replacement)
    try:
        ctx.kube.patch(holder, {"metadata": {"labels": {L_MIGRATING: None},
                                             "annotations": {A_MIGRATION: done.record()}}})
    except KubeError as exc:
        if exc.status != 404:
            raise
    result = result or (
        "completed" if node == m.target else "failed" if placed is None else "elsewhere")
    ctx.metrics.migrations.labels(result).inc()
    if result == "completed":
        ctx.metrics.migration_seconds.observe(max(0.0, ctx.clock() - m.started))
    if placed is not None:
        # The job's stop ends when its replacement runs: measured by the next passes.
        ctx.measuring[m.id] = (m, meta(placed)["name"], ctx.clock() + MEASURE_WITHIN_S)
    target = placed if placed is not None else ctx.pod_ref(m)
    reason = ("MigrationCompleted" if placed else
              "MigrationInterrupted" if result == "suspended" else "MigrationFailed")
    plan = "" if m.predicted_gain_s is None or m.charged_cost_s is None else (
        f" (predicted gain {m.predicted_gain_s:.0f} s, charged cost "
        f"{m.charged_cost_s:.0f} s; the measured cost follows in MigrationCostMeasured)")
    ctx.event(target, reason,
              f"migration {m.id}: replacement {meta(target)['name']} placed on {node}"
              + plan if placed else f"migration {m.id}: {problem}",
              warning=reason == "MigrationFailed")
    log.info("migration %s %s (%s)", m.id, result, node or problem)
    ctx.metrics.migrations_in_flight.set(len(ctx.migrations))


def cancel(ctx: PhaseContext, m: Migration, why: str) -> None:
    ctx.state.withdraw_checkpoint(m.source, m.namespace, m.pod)
    ctx.state.release(m.key)
    ctx.migrations.pop(m.id, None)
    marker = A_REBALANCED if m.reason == "rebalance" else A_MIGRATED
    try:
        body: dict[str, Any] = {"labels": {L_MIGRATING: None},
                                "annotations": {A_MIGRATION: None}}
        holder = ctx.kube.get(m.owner_path()) if m.owned else None
        ctx.kube.patch(pod_path(m.namespace, m.pod),
                       {"metadata": {"uid": m.pod_uid, **body}})
        # At most one attempt per job: it stays where it is from now on.
        pod = {"metadata": {"name": m.pod, "namespace": m.namespace, "uid": m.pod_uid}}
        ctx.mark(pod, holder, {marker: "cancelled"})
    except KubeError as exc:
        if exc.status not in (404, 409, 422):
            raise
    ctx.metrics.migrations.labels("cancelled").inc()
    ctx.event(ctx.pod_ref(m), "MigrationCancelled",
              f"migration {m.id}: {why}; the job keeps running on {m.source}",
              warning=True)
    log.info("migration %s cancelled: %s", m.id, why)
    ctx.metrics.migrations_in_flight.set(len(ctx.migrations))


def cancel_deleted(ctx: PhaseContext, m: Migration, why: str) -> None:
    """End ``m`` as cancelled because its user deleted the job mid-move (its pod, its owner
    or its replacement): nothing is recreated (a bare pod's replacement that never ran is
    deleted), whatever survives keeps the record as cancelled and no longer reads as in
    flight (a restart does not resume it), and the reservation and both nodes are free."""
    ended = {"labels": {L_MIGRATING: None},
             "annotations": {A_MIGRATION: replace(m, phase="cancelled").record()}}
    survivors: list[tuple[dict[str, Any], str]] = []

    def keep(path: str, uid: str, kind: str) -> None:
        try:
            survivors.append((ctx.kube.patch(path, {"metadata": {"uid": uid, **ended}}),
                              kind))
        except KubeError as exc:
            if exc.status not in (404, 409, 422):
                raise

    keep(pod_path(m.namespace, m.pod), m.pod_uid, "Pod")
    if m.owned:
        keep(m.owner_path(), m.owner_uid, m.owner_kind)
    else:
        pinned_name = ctx.replacement_name(m)
        for name in (pinned_name, pinned_name + "-u"):
            rep = ctx.kube.get(pod_path(m.namespace, name))
            if rep is None:
                continue
            md = meta(rep)
            if md.get("deletionTimestamp") or (rep.get("spec") or {}).get("nodeName"):
                keep(pod_path(m.namespace, name), str(md.get("uid")), "Pod")
            else:
                # Gated or not yet placed: it never ran, and goes with the job (409 if it
                # was bound meanwhile: the next pass looks again).
                ctx.kube.delete(pod_path(m.namespace, name), {"preconditions": {
                    "uid": md.get("uid"), "resourceVersion": md.get("resourceVersion")}})
    ctx.state.withdraw_checkpoint(m.source, m.namespace, m.pod)
    ctx.state.release(m.key)
    ctx.migrations.pop(m.id, None)
    ctx.stuck_reported.discard(m.id)
    ctx.evictions_sent.discard(m.id)
    ctx.metrics.migrations.labels("cancelled").inc()
    if survivors:
        obj, kind = survivors[0]
        ctx.event(obj, "MigrationCancelled",
                  f"migration {m.id}: {why}; nothing is recreated", kind=kind)
    log.info("migration %s cancelled: %s; nothing is recreated", m.id, why)
    ctx.metrics.migrations_in_flight.set(len(ctx.migrations))
