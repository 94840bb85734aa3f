"""What the agent tells of its jobs: each job's report in the heartbeat, the Prometheus gauges,
what reading a job's progress met, and the notes of the limit change Events. It reads the
loop's state and changes none of it (only its own marks of what it has counted)."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Mapping

from specon.core.categorize import Category
from specon.core.flowcon import FlowList
from specon.core.node import JobView, NodeController
from specon.wire import JobReport, SavedCheckpoint

from .actuators import LimitChange
from .discovery import Target
from .eta import eta_s
from .events import LimitNote, limit_source
from .followed import FollowedJob, measured
from .metrics import BOUNDS, QOS_STATES, AgentMetrics, JobKey
from .progress import ProgressSource, Reading
from .qos_tracker import JobQos

log = logging.getLogger(__name__)


def fmt(v: float | None) -> str:
    """A number in a log line ("-": not known)."""
    return "-" if v is None else f"{v:.4g}"


def job_key(t: Target) -> JobKey:
    return (t.namespace, t.pod, t.container)


def job_eta(job: FollowedJob) -> float | None:
    """Seconds from its last step sample until the job completes (specon_agent.eta)."""
    return eta_s(job.rate, job.target.total_steps, job.qos)


# -- the heartbeat -------------------------------------------------------------------------------
def job_report(job: FollowedJob, view: JobView, now: float, limit: float,
               owner_limit_cores: float | None, checkpoint: SavedCheckpoint | None) -> JobReport:
    """The job's report in the heartbeat (``limit``: its limit as a fraction of the node)."""
    t = job.target
    g = view.growth
    return _qos_report(job, now, JobReport(
        namespace=t.namespace, pod=t.pod, container=t.container, uid=t.uid,
        category=view.cat.category,
        growth=g.progress if g is not None else None,
        efficiency=view.efficiency, loss=view.loss,
        limit=limit, cpu_cores=view.cores,
        owner_limit_cores=owner_limit_cores,
        migrated=view.cat.migrated, checkpointable=t.migratable,
        step=int(job.step) if job.step > 0 else None,
        work_s=job.load.work if job.load is not None and measured(job) else None,
        work_done_s=(job.load.attained if job.load is not None and measured(job)
                     else None),
        demand_cores=job.cap,
        predicted_finish_s=job_eta(job),
        checkpoint=checkpoint, total_steps=t.total_steps, ending=job.ending, kind=t.kind,
        # an engine's zero time (year 1) is no creation time: the report must stay valid
        created=t.created if t.created is not None and t.created >= 0 else None))


def _qos_report(job: FollowedJob, now: float, report: JobReport) -> JobReport:
    q = job.qos
    if q is None:
        return report
    a = q.assessment
    est, low, high = q.target_s()
    slack = a.slack_s if a is not None else None
    return report.model_copy(update={
        "target_loss": q.spec.target_loss, "deadline": q.deadline,
        "target_reached": q.reached_at is not None,
        "qos": a.state if a is not None else "on-track",
        "predicted_target_s": est,
        "predicted_target_low_s": low, "predicted_target_high_s": high,
        "slack_s": slack if slack is not None and math.isfinite(slack) else None,
    })


# -- the metrics ---------------------------------------------------------------------------------
def publish_metrics(m: AgentMetrics, control: NodeController, jobs: Mapping[str, FollowedJob],
                    node_cpus: float, now: float, observing: bool = False) -> None:
    """Set the node's and each job's gauges from the loop's state (``now``: wall clock;
    ``observing``: observe mode, where a job's limit is one the agent would set)."""
    for cat, n in control.counts().items():
        m.jobs.labels(cat.value).set(n)
    for cid, job in jobs.items():
        view = control.jobs.get(cid)
        if view is None:
            continue
        label = job_key(job.target)
        for cat in Category:
            m.job_category.labels(*label, cat.value).set(int(view.cat.category is cat))
        current = control.flow_list(cid)
        for lst in FlowList:
            m.job_flowcon.labels(*label, lst.value).set(int(current is lst))
        if view.loss is not None:
            m.job_loss.labels(*label).set(view.loss)
        # The core counts progress per minute (docs/normalisation.md); metrics are per second.
        if view.growth is not None:
            m.job_growth.labels(*label).set(view.growth.progress / 60)
        if view.efficiency is not None:
            m.job_efficiency.labels(*label).set(view.efficiency / 60)
        # Observe mode: the limit is the one the agent would set; none was.
        (m.job_would_limit if observing else m.job_limit).labels(*label).set(
            min(1.0, control.limits.get(cid, 1.0)) * node_cpus)
        m.job_cpu.labels(*label).set(view.cores)
        _publish_eta(m, label, job, now)
        if job.qos is not None:
            _publish_qos(m, label, job.qos)


def _publish_eta(m: AgentMetrics, label: JobKey, job: FollowedJob, now: float) -> None:
    eta, at = job_eta(job), job.rate.last_t
    if eta is None or at is None:
        # Unknown now (a stall, a lost rate): no sample, not the last one seen.
        for g in (m.job_predicted_finish, m.job_predicted_completion):
            with contextlib.suppress(KeyError):
                g.remove(*label)
        return
    m.job_predicted_finish.labels(*label).set(max(0.0, at + eta - now))
    m.job_predicted_completion.labels(*label).set(at + eta)


def _publish_qos(m: AgentMetrics, label: JobKey, q: JobQos) -> None:
    a = q.assessment
    for state in QOS_STATES:
        m.job_qos.labels(*label, state).set(int(a is not None and a.state == state))
    for bound, v in zip(BOUNDS, q.target_s(), strict=True):
        if v is not None:
            m.job_predicted_target.labels(*label, bound).set(v)
    if a is not None and a.slack_s is not None and math.isfinite(a.slack_s):
        m.job_slack.labels(*label).set(a.slack_s)


def count_reading(m: AgentMetrics, job: FollowedJob, source: ProgressSource,
                  reading: Reading) -> None:
    """Count what reading the job's progress met (parse errors, a dropped loss-regex, log
    rotations and bytes, a refused file), each once."""
    if reading.parse_errors:
        m.parse_errors.inc(reading.parse_errors)
    if reading.regex_dropped:
        m.user_regex_disabled.inc()
        log.warning("%s: its loss-regex spent its time budget in %d polls: dropped, the "
                    "built-in parsers read its lines", job.target.name, source.strikes)
    st = source.stats
    seen = job.stats_seen
    if st.rotations > seen[0]:
        m.log_rotations.labels("rotation").inc(st.rotations - seen[0])
    if st.truncations > seen[1]:
        m.log_rotations.labels("truncation").inc(st.truncations - seen[1])
    if st.bytes_read > seen[2]:
        m.log_bytes.inc(st.bytes_read - seen[2])
    job.stats_seen = (st.rotations, st.truncations, st.bytes_read)
    if st.refused and not job.refusal_seen:
        # Once per job: the open is refused again every poll while the path stays bad.
        job.refusal_seen = True
        m.confinement_refusals.labels("metrics-csv" if source.kind == "csv" else "progress").inc()
        log.warning("%s: %s refused: outside %s, through a symlink, or not a regular file",
                    job.target.name, source.path, job.target.file_root)


# -- the Events ----------------------------------------------------------------------------------
def limit_note(t: Target, ch: LimitChange, control: NodeController, share_rule: str | None,
               restored: bool, observed: bool = False) -> LimitNote:
    """The Event's note for a change of the job's limit (``restored``: given back as the
    agent stops; ``observed``: observe mode's, decided and not written)."""
    view = control.jobs.get(ch.container_id)
    return LimitNote(
        t.namespace, t.pod, t.uid, t.container, ch.before.cores, ch.after.cores,
        restored=restored, observed=observed,
        category=view.cat.category.value if view else None,
        why="the agent is stopping" if restored else
        limit_source(control, ch.container_id, share_rule))
