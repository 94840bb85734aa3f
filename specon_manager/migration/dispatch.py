"""The dispatcher: reads a migration's phase from its record and calls that phase's handler;
a handler that moves the migration on returns it, and the next phase runs in the same pass."""

from __future__ import annotations

from collections.abc import Callable

from specon_manager.migration import checkpoint, evict, place
from specon_manager.migration.context import PhaseContext
from specon_manager.migration.record import Migration

#: By phase: the handler, which returns the migration to go on with now, or None (it waits
#: for the next pass, or ended). done and cancelled have none: nothing is left to do.
HANDLERS: dict[str, Callable[[PhaseContext, Migration, float], Migration | None]] = {
    "reserved": checkpoint.request,
    "checkpointing": checkpoint.verify,
    "evicting": evict.evict,
    "placing": place.place,
}


def step(ctx: PhaseContext, m: Migration) -> None:
    """Take ``m`` as far as it can go now (called under ``ctx.lock``)."""
    now = ctx.clock()
    current: Migration | None = m
    while current is not None and current.phase in HANDLERS:
        current = HANDLERS[current.phase](ctx, current, now)
