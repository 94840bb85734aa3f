"""At shutdown (SIGTERM), the leader hands the bare pods' gated replacements to the scheduler,
so that a manager removed for good (``helm uninstall``, its Deployment deleted) leaves no job
behind a scheduling gate that nothing would ever lift (issue 32).

Always, not only when no successor will come: a replica cannot know whether one will (a
rolling update and an uninstall both start with SIGTERM), and what it does here is what the
next leader would do first anyway. A replacement is ungated only once its source pod is gone
(never two copies of a job), still pinned to the reserved target while that target can take
it, else as an unpinned copy (the pinned one, which never ran, deleted first); the record
stays in ``placing``, so a successor finds the replacement ungated or bound and finishes the
migration from the record, creating nothing. A record in ``placing`` whose source was never
evicted is rolled back instead (the gated replacement, which never ran, deleted; the job stays
where it runs). docs/manager.md, "Shutdown: the gated replacements are handed over"."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from specon_manager.kube import KubeError, meta, pod_path
from specon_manager.migration import Migration, MigrationController
from specon_manager.migration.evict import roll_back
from specon_manager.migration.place import lift_bare, place_bare
from specon_manager.migration.recheck import target_unfit

log = logging.getLogger(__name__)

REASON = "MigrationHandedOver"
REASON_LEFT = "MigrationNotHandedOver"


def gated(pod: dict[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("schedulingGates"))


def hand_over_gated(controller: MigrationController, wait_s: float,
                    keep_lease: Callable[[], bool],
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """Hand over every bare migration in ``placing``, from the records (authoritative: an
    eviction's failure may leave memory a phase behind). A source still terminating is waited
    for, up to ``wait_s``; ``keep_lease`` is asked before each round (False: another replica
    leads, and it is its work). Returns the replacements left gated (each with a Warning
    event saying how to release it by hand)."""
    with controller.lock:
        controller.restore()
        waiting = [m for m in controller.in_flight() if m.kind == "pod" and m.phase == "placing"]
        deadline = clock() + wait_s
        logged = False
        while waiting:
            if not keep_lease():
                log.warning("shutdown: the Lease is no longer held; %d migration(s) left to "
                            "the next leader", len(waiting))
                return []
            left = []
            for m in waiting:
                try:
                    if not _hand_over_one(controller, m):
                        left.append(m)
                except (KubeError, OSError) as exc:
                    log.warning("shutdown: migration %s not handed over yet: %s", m.id, exc)
                    left.append(m)
            if left and not logged:
                log.info("shutdown: waiting up to %.0f s for %d evicted source pod(s) to "
                         "terminate before their replacements are ungated", wait_s, len(left))
                logged = True
            waiting = left
            if not waiting or clock() >= deadline:
                break
            sleep(0.5)
        for m in waiting:
            m = controller.migrations.get(m.id, m)
            ref = {"apiVersion": "v1", "metadata": {"name": m.replacement,
                                                    "namespace": m.namespace}}
            with contextlib.suppress(KubeError, OSError):  # its uid, when it can be read
                ref = controller.kube.get(pod_path(m.namespace, m.replacement)) or ref
            controller.event(
                ref, REASON_LEFT,
                f"migration {m.id}: the manager stopped while this replacement waited for its "
                f"source pod {m.pod} to terminate; it stays gated so that the job never runs "
                "twice. A manager that starts again ungates it once the source is gone; if "
                "none will, remove the gate by hand then (docs/user-guide.md, Uninstall)",
                warning=True)
            log.warning("shutdown: migration %s: source %s/%s still terminating; replacement %s "
                        "left gated", m.id, m.namespace, m.pod, m.replacement)
        return [m.replacement for m in waiting]


def _hand_over_one(controller: MigrationController, m: Migration) -> bool:
    """One round for ``m``: True when handed over (or ended), False while its source is still
    terminating (or a step must be tried again)."""
    kube = controller.kube
    src = kube.get(pod_path(m.namespace, m.pod))
    if src is not None and meta(src).get("uid") == m.pod_uid:
        if meta(src).get("deletionTimestamp"):
            return False  # the replacement waits for it: never two copies
        # Recorded, but the eviction was never sent: the job keeps running where it is.
        roll_back(controller, m, "the manager stopped before the source was evicted")
        return True
    controller.state.source_gone(m.key)
    unfit: str | None = None
    ungated = False
    # At most: ungate (then lifted past the deadline) or lift (an unfit target), delete the
    # pinned pod, ungate the copy, see it ungated.
    for _ in range(5):
        cur = controller.migrations.get(m.id)
        if cur is None:
            return True  # finished (bound already) or cancelled (its replacement deleted)
        m = cur
        rep = kube.get(pod_path(m.namespace, m.replacement))
        if rep is not None and not meta(rep).get("deletionTimestamp"):
            if not gated(rep):
                if ungated:
                    _announce(controller, m, rep, unfit)
                return True
            if m.reserved:
                unfit = target_unfit(controller, m, rep)
                if unfit is not None:
                    # Pinned to a node that cannot take it, it would pend for good.
                    lift_bare(controller, m, rep, controller.clock())
                    continue
            ungated = True
        place_bare(controller, m, controller.clock())
    return False


def _announce(controller: MigrationController, m: Migration, rep: dict[str, Any],
              unfit: str | None) -> None:
    where = (f"pinned to the reserved target {m.target} by node affinity" if m.reserved else
             f"on any node that fits ({unfit or f'the target {m.target} did not take it'})")
    controller.event(rep, REASON,
                     f"migration {m.id}: the manager stopped; this replacement was ungated "
                     f"for the scheduler to place it, {where}. A manager that starts again "
                     "finishes the migration from its record")
    log.info("shutdown: migration %s handed over: %s/%s ungated, %s", m.id, m.namespace,
             m.replacement, where)
