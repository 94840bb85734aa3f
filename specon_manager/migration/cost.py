"""A completed migration's measured cost: the seconds its job was stopped, from the checkpoint
request to its replacement's containers running, kept on the job's object as a running mean
(what the planner charges its next move) and set against a planned move's prediction."""

from __future__ import annotations

from typing import Any

from specon import rfc3339
from specon.core.move_cost import format_cost, realised_gain, updated_cost
from specon_manager.kube import KubeError, annotations_of, meta, pod_path
from specon_manager.migration.context import PhaseContext, log
from specon_manager.migration.record import A_MOVE_COST

#: How long after a completed migration's replacement was bound its container may take to
#: start (image pull included) and still give the move's measured cost; later, none is taken.
MEASURE_WITHIN_S = 3600.0


def started_at(pod: dict[str, Any]) -> float | None:
    """When the pod's containers were all running (the latest ``state.running.startedAt``, the
    node's clock), or None while one is not (or the pod is not Running)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return None
    times = []
    for cs in status.get("containerStatuses") or ():
        running = ((cs or {}).get("state") or {}).get("running") or {}
        since = running.get("startedAt") if isinstance(running, dict) else None
        if not since:
            return None
        try:
            times.append(rfc3339.parse(str(since)))
        except ValueError:
            return None
    return max(times) if times else None


def measure(ctx: PhaseContext, mid: str) -> None:
    """The cost of completed migration ``mid``, once its replacement runs: the seconds from
    the checkpoint request to the replacement's containers started (node clock, bounded
    by the manager's: never before the request, never after now). Written on the job's
    object as its running mean (``specon.io/move-cost-s``, what the planner charges its
    next move), observed in ``specon_manager_move_cost_seconds`` and, for a planned move, set
    against its prediction (``specon_manager_move_gain_seconds``, event MigrationCostMeasured)."""
    m, name, until = ctx.measuring[mid]
    now = ctx.clock()
    pod = ctx.kube.get(pod_path(m.namespace, name))
    running = None if pod is None else started_at(pod)
    if pod is None or running is None:
        ended = pod is None or bool(meta(pod).get("deletionTimestamp")) or (
            pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if ended or now > until:
            del ctx.measuring[mid]
            log.info("migration %s: no cost measured (its replacement %s)", mid,
                     "ended before it ran" if ended else "has not started in "
                     f"{MEASURE_WITHIN_S:.0f} s")
        return
    del ctx.measuring[mid]
    begin = m.requested or m.started
    cost = min(max(running, begin), now) - begin
    holder = m.owner_path() if m.owned else pod_path(m.namespace, name)
    uid = m.owner_uid if m.owned else meta(pod).get("uid")
    obj = ctx.kube.get(holder)
    if obj is not None and meta(obj).get("uid") == uid:
        mean = updated_cost(annotations_of(obj).get(A_MOVE_COST), cost)
        try:
            ctx.kube.patch(holder, {"metadata": {"uid": uid, "annotations": {
                A_MOVE_COST: format_cost(mean)}}})
        except KubeError as exc:
            if exc.status not in (404, 409):
                raise
    ctx.metrics.move_cost_seconds.observe(cost)
    text = (f"migration {m.id}: the job was stopped {cost:.0f} s (from the checkpoint "
            f"request to its replacement {name} running)")
    if m.predicted_gain_s is not None and m.charged_cost_s is not None:
        real = realised_gain(m.predicted_gain_s, m.charged_cost_s, cost)
        for kind, gain in (("predicted", m.predicted_gain_s), ("realised", real)):
            ctx.metrics.move_gain_seconds.labels(kind).observe(gain)
            ctx.metrics.move_gain_sum.labels(kind).inc(gain)
        text += (f"; charged {m.charged_cost_s:.0f} s, predicted gain "
                 f"{m.predicted_gain_s:.0f} s, realised gain {real:.0f} s (the prediction "
                 "with the measured cost)")
    ctx.event(pod, "MigrationCostMeasured", text)
    log.info("migration %s: move cost %.1f s", m.id, cost)
