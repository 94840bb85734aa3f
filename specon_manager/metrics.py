"""The manager's Prometheus metrics (``specon_manager_`` prefix, units in names, bounded labels).

Each app owns its registry, so two managers in one process (tests) never share counters. Until
the next release each metric is also exported under its old ``specon_`` name (docs/upgrades.md).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from specon.metric_names import deprecated_alias

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class ManagerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.extender_requests = Counter(
            "specon_manager_extender_requests_total", "Extender calls from kube-scheduler.",
            ["verb", "result"], registry=r)
        self.extender_seconds = Histogram(
            "specon_manager_extender_request_duration_seconds", "Time to answer an extender call.",
            ["verb"], buckets=_LATENCY_BUCKETS, registry=r)
        self.heartbeats = Counter(
            "specon_manager_heartbeats_total",
            "Heartbeats received, by result (accepted, unauthenticated, forbidden, invalid, "
            "clock_skew, unknown_node).", ["result"], registry=r)
        self.agent_auth_refusals = Counter(
            "specon_manager_agent_auth_refusals_total",
            "Agent calls refused for their credential, by reason (missing, malformed, "
            "unknown_token, expired, audience, not_authenticated, not_agent, unbound, "
            "unavailable, throttled; docs/security.md).", ["reason"], registry=r)
        self.token_reviews = Counter(
            "specon_manager_agent_token_reviews_total",
            "TokenReviews sent to the API server for agents' tokens not in the cache.",
            registry=r)
        self.heartbeats_superseded = Counter(
            "specon_manager_heartbeats_superseded_total",
            "Accepted heartbeats older (seq and time) than the node's last: not kept, answered "
            "accepted=false.", registry=r)
        self.heartbeat_jobs_ignored = Counter(
            "specon_manager_heartbeat_jobs_ignored_total",
            "Jobs in accepted heartbeats that are not pods on the reporting node (by UID, from "
            "the pod cache): dropped from the report.", registry=r)
        self.reallocation_requests = Counter(
            "specon_manager_reallocation_requests_total",
            "Reallocation requests from agents, by decision.", ["decision"], registry=r)
        self.bodies_refused = Counter(
            "specon_manager_request_bodies_refused_total", "Requests refused for their body size.",
            registry=r)
        self.bodies_dropped = Counter(
            "specon_manager_request_bodies_dropped_total",
            "Request bodies not read: not complete within body_timeout_s (timeout), or "
            "unauthenticated ones over max_unauthenticated_bodies at once (busy).", ["reason"],
            registry=r)
        self.heartbeat_streams = Gauge(
            "specon_manager_heartbeat_streams",
            "Agents' heartbeat streams open now (POST /v1/heartbeats).", registry=r)
        self.nodes = Gauge(
            "specon_manager_nodes", "Nodes known from heartbeats, fresh or stale (unknown).",
            ["state"], registry=r)
        self.jobs = Gauge(
            "specon_manager_jobs", "Training jobs reported by fresh nodes, by category.",
            ["category"], registry=r)
        self.qos_jobs = Gauge(
            "specon_manager_qos_jobs",
            "Training jobs reported by fresh nodes, by QoS state (none, on-track, at-risk, "
            "given-up, reached).", ["state"], registry=r)
        self.qos_invalid = Counter(
            "specon_manager_qos_invalid_pods_total",
            "Training pods whose QoS annotations were malformed (one InvalidQoS event each).",
            registry=r)
        self.migrations_held = Counter(
            "specon_manager_migrations_held_total",
            "Migrations asked for but answered stay because the job is at risk or has less "
            "slack than a migration costs, by reason (converged, rebalance).", ["reason"],
            registry=r)
        self.migrations = Counter(
            "specon_manager_migrations_total",
            "Migrations that ended, by result (completed, elsewhere, cancelled, stayed, "
            "failed, suspended).",
            ["result"], registry=r)
        self.migrations_started = Counter(
            "specon_manager_migrations_started_total", "Migrations started, by reason.", ["reason"],
            registry=r)
        self.migrations_in_flight = Gauge(
            "specon_manager_migrations_in_flight", "Migrations in flight.", registry=r)
        self.migration_seconds = Histogram(
            "specon_manager_migration_duration_seconds",
            "From the choice of target to the replacement placed (completed migrations).",
            buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600), registry=r)
        self.move_cost_seconds = Histogram(
            "specon_manager_move_cost_seconds",
            "Measured cost of completed migrations: seconds from the checkpoint request to the "
            "replacement's containers running (what the planner then charges the job).",
            buckets=(5, 10, 20, 30, 60, 90, 120, 180, 300, 600, 1200, 3600), registry=r)
        self.move_gain_seconds = Histogram(
            "specon_manager_move_gain_seconds",
            "Planned moves (progress policy) once their cost is measured: the predicted gain in "
            "the sum of completion times, net of the cost charged (kind=predicted), and the same "
            "prediction with the measured cost instead (kind=realised; docs/manager.md, "
            "\"Move cost\"). Gains can be negative, so the library exposes no _sum: see "
            "specon_manager_move_gain_sum_seconds.", ["kind"],
            buckets=(-600, -120, -30, 0, 30, 120, 300, 600, 1800, 3600, 7200), registry=r)
        self.move_gain_sum = Gauge(
            "specon_manager_move_gain_sum_seconds",
            "The sum of specon_manager_move_gain_seconds' observations, by kind (divide by its "
            "_count for the mean gain per measured move).", ["kind"], registry=r)
        self.checkpoint_wait_seconds = Histogram(
            "specon_manager_migration_checkpoint_wait_seconds",
            "From the checkpoint request to the verified checkpoint.",
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300), registry=r)
        self.rebalance_rounds = Counter(
            "specon_manager_rebalance_rounds_total", "Rebalancing rounds run by the leader.",
            registry=r)
        self.rebalance_moves = Counter(
            "specon_manager_rebalance_moves_total", "Moves planned by rebalancing, by outcome.",
            ["outcome"], registry=r)
        self.leader = Gauge(
            "specon_manager_leader", "1 while this replica holds the leader Lease.", registry=r)
        self.reconcile_errors = Counter(
            "specon_manager_reconcile_errors_total", "Errors while reconciling migrations.",
            registry=r)
        self.migrations_stuck = Counter(
            "specon_manager_migration_source_stuck_total",
            "Migrations whose evicted source pod was still terminating past its grace period "
            "plus source_stuck_after_s (reported once each, event MigrationSourceStuck).",
            registry=r)
        self.loop_errors = Counter(
            "specon_manager_controller_loop_errors_total",
            "Controller loop passes that failed, by kind (kubernetes: the API server refused "
            "or did not answer; bug: anything else, logged with its traceback).", ["kind"],
            registry=r)
        self.fenced_writes = Counter(
            "specon_manager_fenced_writes_total",
            "Controller writes refused before they were sent: this replica had not renewed "
            "the leader Lease within its renew deadline.", registry=r)
        # Each also under its name before the specon_manager_ prefix, until the next release.
        for metric in [m for m in vars(self).values() if isinstance(m, MetricWrapperBase)]:
            new = next(iter(metric.describe())).name
            deprecated_alias(r, metric, "specon_" + new.removeprefix("specon_manager_"))
        # Metrics newer than the prefix: no old name.
        self.would_migrations = Counter(
            "specon_manager_would_migrations_total",
            "Observe mode: moves decided and not made (one WouldMigrate Event on the pod each), "
            "by reason (converged, rebalance, progress).", ["reason"], registry=r)
        self.would_prioritize = Counter(
            "specon_manager_would_prioritize_total",
            "Observe mode: prioritize calls for training pods answered with equal scores, by "
            "whether SpeCon's own scores would have preferred some nodes (preferred) or not "
            "(indifferent); the scores are in the debug log.", ["choice"], registry=r)
