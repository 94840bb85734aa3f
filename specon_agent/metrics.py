"""The agent's Prometheus metrics (``specon_agent_`` prefix, units in names, bounded labels).

Per-job series carry ``namespace``, ``pod`` and ``container`` of a job on this node (not ``job``:
Prometheus reserves that label for the scrape job and would store ours as ``exported_job``),
and are removed when the job leaves, so their number is bounded by the jobs the node runs at
once. Each agent owns its registry (two agents in one test process never share counters).
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from specon.core.categorize import Category
from specon.core.flowcon import FlowList
from specon.metric_names import deprecated_alias
from specon.wire import QOS_STATES as WIRE_QOS_STATES

#: The labels of every per-job series, in order.
JOB_LABELS = ("namespace", "pod", "container")
JobKey = tuple[str, str, str]

#: The states of a job that states a target or deadline (all of specon.wire's but "none").
QOS_STATES = tuple(s for s in WIRE_QOS_STATES if s != "none")
BOUNDS = ("estimate", "low", "high")
_LOOP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        j = list(JOB_LABELS)
        self.job_category = Gauge(
            "specon_agent_job_category",
            "1 for the job's current category (PC progressing, WC watching, CC converged).",
            [*j, "category"], registry=r)
        self.job_flowcon = Gauge(
            "specon_agent_job_flowcon_list",
            "1 for the job's current FlowCon list (NL new, WL watching, CL completing).",
            [*j, "list"], registry=r)
        self.job_loss = Gauge("specon_agent_job_loss", "Last loss the job logged.", j,
                              registry=r)
        self.job_growth = Gauge(
            "specon_agent_job_growth_per_second",
            "Normalised progress per second over the last categorisation interval "
            "(docs/normalisation.md).", j, registry=r)
        deprecated_alias(r, self.job_growth, "specon_agent_job_growth_per_minute", scale=60)
        self.job_efficiency = Gauge(
            "specon_agent_job_growth_efficiency_per_core_second",
            "FlowCon's growth efficiency over the last interval (progress per core per second).",
            j, registry=r)
        deprecated_alias(r, self.job_efficiency,
                         "specon_agent_job_growth_efficiency_per_core_minute", scale=60)
        self.job_limit = Gauge("specon_agent_job_cpu_limit_cores",
                               "CPU limit the agent set for the job.", j, registry=r)
        self.job_would_limit = Gauge(
            "specon_agent_job_would_cpu_limit_cores",
            "Observe mode: the CPU limit the agent would set for the job (not written; "
            "specon_agent_job_cpu_limit_cores stays unset).", j, registry=r)
        self.job_cpu = Gauge("specon_agent_job_cpu_usage_cores",
                             "CPU the job used over the last interval (cgroup counter).", j,
                             registry=r)
        self.jobs = Gauge("specon_agent_jobs", "Training jobs on this node, by category.",
                          ["category"], registry=r)
        self.node_cpus = Gauge("specon_agent_node_cpus", "CPUs of this node.", registry=r)
        self.node_cpu_speed = Gauge(
            "specon_agent_node_cpu_speed_ratio",
            "This node's per-core speed as the agent measured it at start (1: the probe's "
            "reference core).", registry=r)
        self.limit_writes = Counter(
            "specon_agent_limit_writes_total", "CPU limit writes that changed a limit.",
            ["direction"], registry=r)
        self.would_limit_writes = Counter(
            "specon_agent_would_limit_writes_total",
            "Observe mode: CPU limit changes decided and not written, by direction.",
            ["direction"], registry=r)
        self.limit_events = Counter(
            "specon_agent_limit_events_total",
            "Limit changes told as Kubernetes Events, by outcome: posted, merged (into the "
            "pod's next Event), dropped (queue full), failed (the API refused or did not answer).",
            ["outcome"], registry=r)
        self.limit_failures = Counter(
            "specon_agent_limit_write_failures_total",
            "CPU limit reads or writes that failed, by reason (gone, unavailable, error).",
            ["reason"], registry=r)
        self.parse_errors = Counter(
            "specon_agent_parse_errors_total",
            "Log or progress lines that could not be decoded or parsed.", registry=r)
        self.user_regex_disabled = Counter(
            "specon_agent_user_regex_disabled_total",
            "Jobs whose own loss-regex was dropped: it spent its time budget in too many polls "
            "(the built-in parsers read their lines since; docs/security.md).", registry=r)
        self.log_rotations = Counter(
            "specon_agent_log_rotations_total", "Followed files found rotated or truncated.",
            ["kind"], registry=r)
        self.confinement_refusals = Counter(
            "specon_agent_file_refusals_total",
            "Pod-supplied paths refused: outside the root, through a symlink, not a regular "
            "file, or over a size bound (docs/security.md).", ["what"], registry=r)
        self.log_bytes = Counter("specon_agent_log_read_bytes_total",
                                 "Bytes read from followed files.", registry=r)
        self.cpu_unknown = Counter(
            "specon_agent_cpu_readings_missing_total",
            "CPU counter readings that failed (no efficiency for that interval).", registry=r)
        self.loop_seconds = Histogram(
            "specon_agent_loop_duration_seconds", "Time of one pass of a control-loop phase.",
            ["phase"], buckets=_LOOP_BUCKETS, registry=r)
        self.loop_last_pass = Gauge(
            "specon_agent_loop_last_pass_timestamp_seconds",
            "Unix time the control loop last completed a pass (its start-up before the first; "
            "the alert SpeconAgentLoopStalled, docs/observability.md).", registry=r)
        self.loop_last_pass.set_to_current_time()
        self.restore_failures = Counter(
            "specon_agent_limit_restore_failures_total",
            "Changed CPU limits this agent could not put back to their owner's (at start-up, "
            "from an earlier run's record, or at exit); the record keeps them for the next "
            "start (the alert SpeconLimitsNotRestored).", registry=r)
        self.manager_calls = Counter(
            "specon_agent_manager_requests_total",
            "Calls to the manager, by kind (heartbeat, reallocation) and outcome.",
            ["kind", "outcome"], registry=r)
        self.reallocation_requests = Counter(
            "specon_agent_reallocation_requests_total",
            "Converged jobs on a crowded node for which a move was asked (Algorithm 3).",
            registry=r)
        self.discovery_errors = Counter(
            "specon_agent_discovery_reconnects_total",
            "Breaks of the engine's event stream or the pod watch, by reason.", ["reason"],
            registry=r)
        self.checkpoints = Counter(
            "specon_agent_checkpoints_total",
            "saved.json files read, by outcome (verified, rejected: the checkpoint did not match "
            "its manifest, unreadable).", ["outcome"], registry=r)
        self.events = Counter("specon_agent_job_events_total", "Arrivals and departures.",
                              ["event"], registry=r)
        # Quality targets and deadlines (docs/qos.md); only jobs that state one.
        self.job_qos = Gauge(
            "specon_agent_job_qos_state",
            "1 for the job's state against its target or deadline (on-track, at-risk, "
            "given-up, reached).", [*j, "state"], registry=r)
        # Predicted completion (ETA, specon_agent/eta.py): jobs that state where they end.
        self.job_predicted_finish = Gauge(
            "specon_agent_job_predicted_finish_seconds",
            "Predicted seconds until the job completes, at its recent step rate (its last "
            "step, or its target loss when it stops there).", j, registry=r)
        self.job_predicted_completion = Gauge(
            "specon_agent_job_predicted_completion_timestamp_seconds",
            "Unix time the job is predicted to complete, at its recent step rate (the ETA of "
            "specon_agent_job_predicted_finish_seconds as a time: steady while the prediction "
            "holds).", j, registry=r)
        self.job_predicted_target = Gauge(
            "specon_agent_job_predicted_target_seconds",
            "Predicted seconds until the job reaches its target loss (bound: estimate, low, "
            "high: the uncertainty band).", [*j, "bound"], registry=r)
        self.job_slack = Gauge(
            "specon_agent_job_deadline_slack_seconds",
            "Deadline minus the predicted time to the job's goal (negative: late at the "
            "current rate).", j, registry=r)
        self.qos_errors = Counter(
            "specon_agent_qos_annotation_errors_total",
            "Jobs whose quality annotations were malformed (ignored; the log says why).",
            registry=r)

    def forget_job(self, job: JobKey) -> None:
        for g in (self.job_loss, self.job_growth, self.job_efficiency, self.job_limit,
                  self.job_would_limit, self.job_cpu, self.job_predicted_finish,
                  self.job_predicted_completion, self.job_slack):
            with contextlib.suppress(KeyError):
                g.remove(*job)
        for state in QOS_STATES:
            with contextlib.suppress(KeyError):
                self.job_qos.remove(*job, state)
        for bound in BOUNDS:
            with contextlib.suppress(KeyError):
                self.job_predicted_target.remove(*job, bound)
        for cat in Category:
            with contextlib.suppress(KeyError):
                self.job_category.remove(*job, cat.value)
        for lst in FlowList:
            with contextlib.suppress(KeyError):
                self.job_flowcon.remove(*job, lst.value)
