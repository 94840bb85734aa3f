"""The checkpoint phases: ask the job to checkpoint (reserved), then wait until the source
node's agent reports a checkpoint that answers this migration's request (checkpointing).
Nothing is evicted before; a deleted job, an ended pod or the deadline cancels the move."""

from __future__ import annotations

from specon.wire import CheckpointRequest
from specon_manager.kube import pod_path
from specon_manager.migration.context import PhaseContext
from specon_manager.migration.end import cancel, cancel_deleted
from specon_manager.migration.recheck import why_deleted
from specon_manager.migration.record import Migration


def request(ctx: PhaseContext, m: Migration, now: float) -> Migration:
    """Phase reserved: ask the job (through its node's agent) to checkpoint; the migration,
    now checkpointing, goes on in the same pass."""
    ctx.state.request_checkpoint(m.source, CheckpointRequest(
        namespace=m.namespace, pod=m.pod, uid=m.pod_uid, id=m.id))
    m = ctx.set(m, phase="checkpointing", requested=now,
                deadline=now + ctx.settings.checkpoint_timeout_s)
    ctx.write_source(m)
    ctx.event(ctx.pod_ref(m), "CheckpointRequested",
              f"migration {m.id}: asked the job to checkpoint (request id {m.id})")
    ctx.hook("checkpointing")
    return m


def verify(ctx: PhaseContext, m: Migration, now: float) -> Migration | None:
    """Phase checkpointing: the migration, now evicting, once the job's checkpoint answers
    this migration's request; else None (still waiting, or cancelled)."""
    pod = ctx.kube.get(pod_path(m.namespace, m.pod))
    # A terminating pod still reads Running, and its job's shutdown save answers the
    # pending request: a user's delete must end the move here (issue 32).
    deleted = why_deleted(ctx, m, pod)
    if deleted is not None:
        cancel_deleted(ctx, m, deleted)
        return None
    assert pod is not None
    if (pod.get("status") or {}).get("phase") != "Running":
        cancel(ctx, m, "the pod ended before its checkpoint was verified")
        return None
    # Only the source node's agent can read the job's saved.json; a report from any
    # other node, or about another pod of the same name, proves nothing.
    found = ctx.state.job_on(m.source, m.namespace, m.pod, m.pod_uid)
    ck = found.checkpoint if found else None
    # saved.json's `request` is the last request the job honoured; every later save
    # keeps it, so a match means a verified checkpoint at or after this request.
    if ck is not None and ck.request == m.id:
        ctx.metrics.checkpoint_wait_seconds.observe(max(0.0, now - m.started))
        ctx.event(pod, "CheckpointVerified",
                  f"migration {m.id}: checkpoint {ck.name} (step {ck.step}, sha256 "
                  f"{ck.sha256[:12]}) verified")
        m = ctx.set(m, phase="evicting", deadline=now + ctx.settings.placement_timeout_s)
        ctx.write_source(m)
        ctx.hook("evicting")
        return m
    if now > m.deadline:
        cancel(ctx, m, f"no verified checkpoint within "
                       f"{ctx.settings.checkpoint_timeout_s:.0f} s")
    return None
