"""What a migration looks at again before (and while) it evicts: whether its user deleted the
job (issue 32), and whether the reserved target can still take it."""

from __future__ import annotations

from typing import Any

from specon_manager.kube import meta
from specon_manager.migration.context import PhaseContext
from specon_manager.migration.pod_spec import fits
from specon_manager.migration.record import Migration


def node_state(node: dict[str, Any] | None) -> str:
    """'gone', 'Ready', or the Ready condition's status and reason (e.g. 'NotReady
    (NodeStatusUnknown)')."""
    if node is None:
        return "gone"
    for cond in (node.get("status") or {}).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            if cond.get("status") == "True":
                return "Ready"
            return f"NotReady ({cond.get('reason') or cond.get('status')})"
    return "of unknown state"


def why_deleted(ctx: PhaseContext, m: Migration, pod: dict[str, Any] | None,
                pod_too: bool = True) -> str | None:
    """Why ``m``'s job was deleted by its user (its owner deleted, being deleted or
    replaced by a namesake; with ``pod_too``, its source pod ``pod``, as just read, gone
    or terminating: asked only before the eviction), or None."""
    if m.owned:
        owner = ctx.kube.get(m.owner_path())
        if owner is None or meta(owner).get("uid") != m.owner_uid:
            return f"its {m.owner_kind} {m.owner} was deleted"
        if meta(owner).get("deletionTimestamp"):
            return f"its {m.owner_kind} {m.owner} is being deleted"
    if not pod_too:
        return None
    if pod is None or meta(pod).get("uid") != m.pod_uid:
        return f"the pod {m.pod} was deleted"
    if meta(pod).get("deletionTimestamp"):
        return f"the pod {m.pod} is being deleted"
    return None


def target_unfit(ctx: PhaseContext, m: Migration, pod: dict[str, Any]) -> str | None:
    """Why the reserved target can no longer take the job (gone, NotReady, cordoned, or
    no longer allowed by the pod's nodeSelector and required node affinity: :func:`fits`,
    as at the start), or None. Asked before the eviction: a move to an unfit target would
    leave the job down until the placement timeout."""
    node = ctx.kube.get(f"/api/v1/nodes/{m.target}")
    if node is None:
        return f"the target {m.target} is gone"
    if (node.get("spec") or {}).get("unschedulable"):
        return f"the target {m.target} was cordoned"
    state = node_state(node)
    if state.startswith("NotReady"):
        return f"the target {m.target} is {state}"
    if not fits(pod.get("spec") or {}, node):
        return (f"the pod no longer fits the target {m.target} (its nodeSelector or "
                "required node affinity)")
    return None
