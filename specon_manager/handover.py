"""What becomes of the migrations in flight when this replica stops leading: each keeps its last
record on the API, the next leader resumes it from there (MigrationController.restore), and
this replica lets go of it with one log line, so that no migration ends unexplained."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from specon_manager.state import ClusterState

if TYPE_CHECKING:
    from specon_manager.migration import Migration

log = logging.getLogger("specon_manager.migration")


def hand_over(migrations: dict[str, Migration], state: ClusterState) -> None:
    """Let go of ``migrations`` (emptied): their reservations and checkpoint requests leave this
    replica's state, one line each says where the migration goes on."""
    for m in migrations.values():
        state.release(m.key)
        state.withdraw_checkpoint(m.source, m.namespace, m.pod)
        log.info("migration %s (%s/%s): handed over to the next leader, which resumes it from "
                 "its record", m.id, m.namespace, m.pod)
    migrations.clear()
