"""The reserve phase: whether a pod may move now and where (Algorithm 4, or the target a plan
names), and, when it may, the migration recorded on its source pod with the target reserved.
The refusals (a node busy, a cordoned or unfitting target, the global rate limit, the job's
QoS) are answered at once, without a record."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from specon.core.categorize import Category
from specon.core.qos_rules import migration_hold
from specon.core.scoring import WorkerView, decide_reallocation
from specon.names import migratable
from specon.wire import ReallocationReply
from specon_manager.kube import controller_ref, labels_of, meta
from specon_manager.migration.context import PhaseContext, log
from specon_manager.migration.movable import is_ending, owner_of, parent_of, why_not_movable
from specon_manager.migration.observe import would_move
from specon_manager.migration.pod_spec import cpu_limit_of, fits
from specon_manager.migration.record import A_MIGRATED, A_MIGRATED_AT, Migration
from specon_manager.state import Reservation, pod_key


def reserve(ctx: PhaseContext, pod: dict[str, Any], reason: str = "converged",
            target: str | None = None, predicted_gain_s: float | None = None,
            cost_s: float | None = None) -> ReallocationReply | Migration:
    """Start migrating ``pod`` (to ``target``, or where Algorithm 4 says): the migration,
    recorded and its target reserved (in phase reserved, for the dispatcher to go on with),
    or the answer when it does not start. A planned move gives its predicted gain and the
    cost it charged the job (``cost_s``, also the cost its slack is held against): recorded,
    and compared with the measured cost at the end. Called under ``ctx.lock``."""
    md = meta(pod)
    ns, name = md["namespace"], md["name"]
    job = owner_of(ctx.kube, pod)
    why = why_not_movable(pod, job, reason, ctx.settings.migrate_replicaset_pods,
                          parent_of(ctx.kube, job))
    if is_ending(why):
        return ReallocationReply(decision="refused", reason=str(why))
    if why is not None and "already" in why:
        return ReallocationReply(decision="stay", reason=why, migrated=True)
    if why is not None:
        if target is not None:
            return ReallocationReply(decision="refused", reason=why)
        # Never movable (not opted in, an owner the manager cannot rely on): the
        # simulator's rule too, judged best where it is and marked, so that its agent
        # stops asking; nothing is written to the pod.
        source = str((pod.get("spec") or {}).get("nodeName") or "")
        d = decide_reallocation((), ctx.state.weights, source, movable=False)
        log.info("%s/%s stays where it is: %s", ns, name, why)
        assert d.decision == "stay"
        if migratable(labels_of(pod)):
            # It asked to be movable and its owner's shape says no: tell its user.
            ctx.event(pod, "MigrationRefused", f"{name} cannot be migrated: {why}",
                      warning=True)
        return ReallocationReply(decision="stay", target=source, migrated=d.migrated,
                                 reason=why)
    if any(m.namespace == ns and m.pod == name for m in ctx.migrations.values()):
        return ReallocationReply(decision="refused", reason="already migrating")
    hold = qos_hold(ctx, pod, cost_s)
    if hold is not None:
        ctx.metrics.migrations_held.labels(reason).inc()
        log.info("not moving %s/%s (%s): %s", ns, name, reason, hold)
        return ReallocationReply(decision="stay", reason=hold)
    source = pod["spec"]["nodeName"]
    busy = ctx.busy_nodes()
    if source in busy:
        return ReallocationReply(decision="refused",
                                 reason=f"a migration is in flight on node {source}")
    now = ctx.clock()
    cordoned = ctx.cordoned()
    allowed = fitting_nodes(ctx, pod)
    if target is None:
        found = ctx.state.find_job(ns, name)
        category = found[1].category if found else Category.CONVERGED
        unfit = set(ctx.state.fresh_nodes()) - allowed if allowed is not None else set()
        closed = (busy | cordoned | unfit) - {source}
        views = [v if v.name not in closed else replace(v, available=False)
                 for v in ctx.state.views(ctx.state.fresh_nodes())]
        if source not in {v.name for v in views}:
            views.append(WorkerView(source, available=False))
        d = decide_reallocation(views, ctx.state.weights, source, category)
        if d.decision == "stay":
            if not ctx.observing:  # observe mode writes nothing to the workload
                ctx.mark(pod, job, {A_MIGRATED: "stayed", A_MIGRATED_AT: f"{now:.3f}"})
            ctx.metrics.migrations.labels("stayed").inc()
            ctx.event(pod, "MigrationNotNeeded",
                      f"{name} is best where it is (scores {dict(d.scores)})")
            return ReallocationReply(decision="stay", target=source, migrated=True,
                                     reason=d.reason)
        if d.target is None:
            return ReallocationReply(decision="refused", reason=f"{d.reason} (nodes "
                                     "unknown or busy)")
        target = d.target
    elif target in busy:
        return ReallocationReply(decision="refused",
                                 reason=f"a migration is in flight on node {target}")
    elif target in cordoned:
        return ReallocationReply(decision="refused",
                                 reason=f"node {target} is cordoned")
    elif allowed is not None and target not in allowed:
        return ReallocationReply(decision="refused", reason=(
            f"the pod cannot run on node {target} (its nodeSelector or required node "
            "affinity)"))
    if not rate_ok(ctx, now):
        return ReallocationReply(decision="refused", reason="global migration rate limit")
    if ctx.observing:
        return would_move(ctx, pod, reason, source, target, predicted_gain_s, cost_s)
    ref = controller_ref(pod)
    container, owner_cpu = owner_cpu_limit(ctx, pod)
    m = Migration(
        id=uuid.uuid4().hex[:12], namespace=ns, pod=name, pod_uid=md["uid"],
        source=source, target=target,
        kind=str(job["kind"]).lower() if job is not None else "pod",
        owner=ref["name"] if job is not None and ref else "",
        owner_uid=str(ref.get("uid", "")) if job is not None and ref else "",
        reason=reason, phase="reserved", started=now,
        deadline=now + ctx.settings.checkpoint_timeout_s,
        predicted_gain_s=predicted_gain_s, charged_cost_s=cost_s,
        owner_cpu_container=container, owner_cpu_limit=owner_cpu)
    ctx.write_source(m)
    ctx.start_times.append(now)
    ctx.migrations[m.id] = m
    ctx.state.reserve(Reservation(m.key, m.id, target, source, pod=pod_key(ns, name)))
    ctx.metrics.migrations_started.labels(reason).inc()
    ctx.metrics.migrations_in_flight.set(len(ctx.migrations))
    plan = "" if predicted_gain_s is None or cost_s is None else (
        f"; predicted gain {predicted_gain_s:.0f} s net of a charged move cost of "
        f"{cost_s:.0f} s")
    ctx.event(pod, "MigrationStarted",
              f"migration {m.id} ({reason}): {source} -> {target}; target reserved"
              + plan)
    log.info("migration %s: %s/%s %s -> %s (%s)", m.id, ns, name, source, target, reason)
    ctx.hook("reserved")
    return m


def owner_cpu_limit(ctx: PhaseContext, pod: dict[str, Any]) -> tuple[str, float | None]:
    """The training container and the CPU limit its owner set (cores), as the source's agent
    last reported it, else the pod's spec (which holds the owner's limit while that agent has
    not changed it); ("", None) without a report (no container known)."""
    md = meta(pod)
    source = (pod.get("spec") or {}).get("nodeName") or ""
    rep = ctx.state.job_on(source, md["namespace"], md["name"], md.get("uid", ""))
    if rep is None:
        return "", None
    if rep.owner_limit_cores is not None:
        return rep.container, rep.owner_limit_cores
    cores = cpu_limit_of(pod.get("spec") or {}, rep.container)
    return rep.container, cores if cores is not None and cores > 0 else None


def fitting_nodes(ctx: PhaseContext, pod: dict[str, Any]) -> set[str] | None:
    """The nodes the pod's new copy could be placed on by its ``nodeSelector`` and required
    node affinity (:func:`fits`), or None when it names neither (any node). A target
    outside them would be reserved in vain: the copy (made from the same spec, by the
    manager or the owner) waits there until the placement timeout lifts the reservation.
    A Kueue-admitted Job's pods carry their ResourceFlavor's node labels this way."""
    spec = pod.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if not selector and not affinity:
        return None
    # The node selector narrows a list on the server; fits() judges every node.
    params = {"labelSelector": ",".join(f"{k}={v}" for k, v in sorted(
        selector.items()))} if selector else {}
    return {meta(n)["name"] for n in ctx.all_nodes(**params) if fits(spec, n)}


def qos_hold(ctx: PhaseContext, pod: dict[str, Any], cost_s: float | None = None) -> str | None:
    """Why the job in ``pod`` must not move now (at risk, or less slack than a migration
    costs: ``cost_s``, or ``migration_cost_s``), from its source node's latest fresh
    report; None when it may."""
    md = meta(pod)
    source = (pod.get("spec") or {}).get("nodeName") or ""
    rep = ctx.state.job_on(source, md["namespace"], md["name"], md.get("uid", ""))
    if rep is None:
        return None
    return migration_hold(rep.qos, rep.slack_s, ctx.settings.migration_cost_s
                          if cost_s is None else cost_s)


def rate_ok(ctx: PhaseContext, now: float) -> bool:
    """Whether the global rate limit lets one more migration start at ``now``."""
    window = ctx.settings.migration_window_s
    while ctx.start_times and now - ctx.start_times[0] > window:
        ctx.start_times.popleft()
    return len(ctx.start_times) < ctx.settings.max_migrations_per_window
