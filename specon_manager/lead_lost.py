"""What becomes of the migrations in flight when this replica stops leading, or when the fence
refuses a step of one (specon_manager.leader): each keeps its last record on the API, the next
leader resumes it from there (MigrationController.restore), and this replica lets go of it
with one log line, so that no migration ends unexplained."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from specon_manager.kube import FENCED, KubeError
from specon_manager.state import ClusterState

if TYPE_CHECKING:
    from specon_manager.migration import Migration

log = logging.getLogger("specon_manager.migration")


def is_fenced(exc: BaseException) -> bool:
    return isinstance(exc, KubeError) and exc.status == FENCED


def step_failed(m: Migration, exc: BaseException) -> bool:
    """Log a step of ``m`` that failed (the next pass retries it); True when the fence refused
    it: this replica no longer leads, and every later write of the pass would be refused too."""
    if is_fenced(exc):
        log.warning("migration %s (%s/%s, phase %s): fenced, this replica no longer holds the "
                    "Lease; its last record stays, and the next leader resumes it from there",
                    m.id, m.namespace, m.pod, m.phase)
        return True
    log.warning("migration %s (%s): %s; retrying", m.id, m.phase, exc)
    return False


def hand_over(migrations: dict[str, Migration], state: ClusterState) -> None:
    """Let go of ``migrations`` (emptied): their reservations and checkpoint requests leave this
    replica's state, one line each says where the migration goes on."""
    for m in migrations.values():
        state.release(m.key)
        state.withdraw_checkpoint(m.source, m.namespace, m.pod)
        log.info("migration %s (%s/%s): handed over to the next leader, which resumes it from "
                 "its record", m.id, m.namespace, m.pod)
    migrations.clear()
