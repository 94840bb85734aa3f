"""The loop's quality step: each job with a target loss or a deadline judged from its progress
(specon.core.urgency, through its :class:`~specon_agent.qos_tracker.JobQos`), the judgements
handed to the node controller, whose QoS limits then override FlowCon's (not a node share
rule's, unless asked: specon.core.node.qos_limits_over); a job that reached
its target and asked to stop there is asked to save and stop."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from specon.core.node import NodeController
from specon.core.urgency import Assessment

from .checkpoint_requests import write_request
from .cpu import CpuMeter
from .followed import FollowedJob
from .metrics import AgentMetrics
from .reporting import fmt

log = logging.getLogger(__name__)


def judge_qos(jobs: Mapping[str, FollowedJob], control: NodeController, meter: CpuMeter,
              metrics: AgentMetrics, cpus: float, floor_cores: float, now: float,
              limit: bool = True) -> None:
    """Judge every job with a target or deadline (``now``: wall clock; ``floor_cores``: the
    lowest limit a job that can spare CPU is held at); their limits override FlowCon's, and a
    node share rule's only when ``limit`` says so (specon.core.node.qos_limits_over)."""
    judged: dict[str, Assessment | None] = {}
    for cid, job in jobs.items():
        q = job.qos
        if q is None:
            judged[cid] = None
            continue
        before = q.assessment.state if q.assessment is not None else None
        q.sample(now, meter.usage_ns(cid))
        a = q.judge(now, best_cores=q.best_cores(cpus))
        judged[cid] = a
        if a.state != before:
            log.info("%s: %s -> %s (predicted %s s, slack %s s, needs %s cores)",
                     job.target.name, before or "new", a.state, fmt(a.predicted_s),
                     fmt(a.slack_s), fmt(a.need_cores))
        if q.reached_at is not None and q.spec.stop_at_target and not q.stop_asked:
            _stop_at_target(job, metrics)
    was = control.first
    _, changed = control.judge_qos(judged, cpus, floor_cores, limit)
    if changed and limit:
        # The limits follow each job's need at every tick: say so at info level only when
        # the set of jobs given the node changes.
        log.log(logging.INFO if control.first != was else logging.DEBUG,
                "QoS limits (cores): %s", ", ".join(
                    f"{jobs[c].target.name}={v * cpus:.2f}"
                    for c, v in control.qos_limits.items())
                or "none (FlowCon decides)")


def _stop_at_target(job: FollowedJob, metrics: AgentMetrics) -> None:
    assert job.qos is not None
    job.qos.stop_asked = True
    if job.target.checkpoint_dir is None:
        log.warning("%s reached its target; it asked to stop there but has no checkpoint "
                    "directory, so it runs on", job.target.name)
        return
    log.info("%s reached its target loss %s: asking it to save and stop", job.target.name,
             job.qos.spec.target_loss)
    write_request(job.target, f"target-{job.target.cid[:12]}", True, metrics, done=True)
