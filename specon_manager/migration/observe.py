"""Observe mode's end of a move: everything up to the reservation is decided as when enforcing
(Algorithm 4 or the planner's target, every safety rule and cap), and then nothing is done: no
record, no reservation, no checkpoint request, no eviction. The would-be move is told once per
pod and target, as a ``WouldMigrate`` Event on the pod and
``specon_manager_would_migrations_total`` (docs/manager.md, "Observe mode")."""

from __future__ import annotations

from typing import Any

from specon.wire import ReallocationReply
from specon_manager.kube import meta
from specon_manager.migration.context import PhaseContext, log
from specon_manager.state import pod_key

#: Every reply to a move observe mode did not make starts with this (for people: code reads
#: the reply's ``observed``).
OBSERVED = "observe mode"
#: At most this many pods' would-be targets are remembered (the oldest go first).
REMEMBERED = 10_000


def would_move(ctx: PhaseContext, pod: dict[str, Any], reason: str, source: str, target: str,
               predicted_gain_s: float | None, cost_s: float | None) -> ReallocationReply:
    """Tell the move that enforcing would start now, and answer that the job stays (marked
    migrated, so that an agent stops asking). Called under ``ctx.lock``."""
    md = meta(pod)
    ns, name = md["namespace"], md["name"]
    key = pod_key(ns, name)
    if ctx.would_moves.get(key) != target:  # a plan made again each round is told once
        ctx.would_moves.pop(key, None)
        ctx.would_moves[key] = target
        while len(ctx.would_moves) > REMEMBERED:
            del ctx.would_moves[next(iter(ctx.would_moves))]
        ctx.metrics.would_migrations.labels(reason).inc()
        plan = "" if predicted_gain_s is None else (
            f"; predicted gain {predicted_gain_s:.0f} s"
            + ("" if cost_s is None else f" net of a move cost of {cost_s:.0f} s"))
        ctx.event(pod, "WouldMigrate", f"{OBSERVED}: would migrate {name} ({reason}) from "
                  f"{source} to {target}{plan}; not moved")
        log.info("observe mode: would migrate %s/%s %s -> %s (%s)%s", ns, name, source, target,
                 reason, plan)
    return ReallocationReply(decision="stay", target=source, migrated=True, observed=True,
                             reason=f"{OBSERVED}: would migrate to {target}; not moved")
