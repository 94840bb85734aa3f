"""The manager's settings: one pydantic-settings object, from the environment (``SPECON_MANAGER_*``)
or flags; every knob of the service is documented here and in docs/manager.md."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from specon import defaults
from specon.core.policy import canonical, lookup, missing_rules

#: The rules of a policy the manager runs: placement in the extender, moves in its loop.
PLACEMENT_RULES = frozenset({"spread", "specon", "progress"})
MOVE_RULES = frozenset({"none", "specon", "progress"})

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class ManagerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPECON_MANAGER_", extra="forbid")

    # -- serving ------------------------------------------------------------------------------
    host: str = "0.0.0.0"
    port: int = Field(default=8080, ge=1, le=65535)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    #: Largest request body accepted on the agent endpoints (heartbeats, reallocation requests).
    max_agent_body_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    #: Largest request body accepted on the extender endpoints. Names only
    #: (``nodeCacheCapable: true``) are about 15 bytes a node; full Node lists are 2-20 KB a
    #: node, so keep this well under the pod's memory limit (decoded JSON takes several times
    #: its size).
    max_extender_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    #: Most candidate nodes one extender call may name (``NodeNames`` or ``Nodes.items``);
    #: more are refused (413) before any is looked at. Kubernetes supports clusters of up to
    #: 5,000 nodes and kube-scheduler sends an extender only the feasible ones; this is three
    #: times that (docs/security.md). Raise it for a larger cluster.
    max_extender_nodes: int = Field(default=15_000, ge=1)
    #: A request body not complete this long after its headers is dropped (408, the
    #: connection closed): a stalled sender holds neither memory nor a connection for long.
    body_timeout_s: Positive = 10.0
    #: At most this many request bodies from unauthenticated senders (the extender's calls on
    #: a listener that does not demand the scheduler's client certificate) are read at once;
    #: more are answered 503 unread. Agents' bodies are read only after their token is checked.
    max_unauthenticated_bodies: int = Field(default=8, ge=1)
    #: Serve ``/docs``, ``/redoc`` and ``/openapi.json`` (the API's description).
    expose_docs: bool = False
    #: Serve the HTML status page ``/status`` (it names nodes, pods and namespaces).
    expose_status: bool = True
    #: Serve ``/metrics`` (Prometheus).
    expose_metrics: bool = True

    # -- TLS ----------------------------------------------------------------------------------
    #: Serve HTTPS with this certificate (PEM, with its chain) and key; unset: plain HTTP.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    #: Serve ``/filter`` and ``/prioritize`` on this port only (0: on ``port`` with the rest).
    #: The main port then answers 404 for them.
    extender_port: int = Field(default=0, ge=0, le=65535)
    #: With ``extender_port``: the CA that signs kube-scheduler's client certificate. The
    #: extender port then completes a TLS handshake only with a client that presents a
    #: certificate it signed (the scheduler's extender ``tlsConfig``).
    extender_client_ca_file: Path | None = None
    #: With ``extender_client_ca_file``: the names (subject CN or a DNS subjectAltName) a
    #: client certificate must carry on the extender port; a certificate the CA signed for any
    #: other name (the manager's own serving certificate) has its connection closed after the
    #: handshake, with a warning (specon_manager/peer.py). The chart sets the scheduler's
    #: name. Empty: any certificate the CA signed (warned at start).
    extender_client_names: list[str] = Field(default_factory=list)

    # -- agents -------------------------------------------------------------------------------
    #: How agents prove which node they speak for. ``tokenreview``: a projected
    #: service-account token for ``agent_audience``, checked with a TokenReview and bound to
    #: the node of the agent pod it was issued to (specon_manager/identity.py). ``static``:
    #: ``tokens_file`` (tests, a manager outside Kubernetes). ``auto``: ``static`` when
    #: ``tokens_file`` is set or ``kubernetes`` is off, else ``tokenreview``.
    agent_auth: Literal["auto", "tokenreview", "static"] = "auto"
    #: The audience the agents' projected tokens are issued for (the chart's DaemonSet asks
    #: the kubelet for exactly this one); a token for any other audience is refused.
    agent_audience: str = Field(default="specon-manager", min_length=1)
    #: The agents' ServiceAccounts, ``namespace:name`` (a token of any other account is
    #: refused even when it is bound to a pod). Required with ``tokenreview``.
    agent_service_accounts: list[str] = Field(default_factory=list)
    #: How long an accepted token is trusted before it is reviewed again (at most until it
    #: expires); a refused one is remembered ``agent_auth_refused_ttl_s``.
    agent_auth_ttl_s: Positive = 60.0
    agent_auth_refused_ttl_s: Positive = 10.0
    #: At most this many TokenReviews a second on average (bursts of twice as many), over
    #: every path that reviews a token; a token over the ceiling is answered 503 (the agent
    #: retries) and not remembered. At most 4 reviews run at once.
    agent_auth_reviews_per_s: Positive = 50.0
    #: At most this many token answers are remembered (least recently used first out).
    agent_auth_cache_entries: int = Field(default=10_000, ge=1)
    #: File of agent credentials, one ``TOKEN NODE`` pair per line (``#`` comments allowed).
    #: A token names the one node it may speak for (the ``static`` mode).
    tokens_file: Path | None = None
    #: Agents are expected to report every ``heartbeat_interval_s``.
    heartbeat_interval_s: Positive = 30.0
    #: A node whose last heartbeat is older than this many intervals is "unknown" (never idle).
    stale_after_intervals: Positive = 3.0
    #: Check every job a heartbeat reports against the API server (a pod of that
    #: namespace/name and UID on that node; looked up in the background and cached), and drop
    #: the others (``specon_manager_heartbeat_jobs_ignored_total``). Needs ``get`` on pods; without
    #: ``kubernetes`` there is nothing to check against.
    verify_reported_pods: bool = True
    #: Keep each reported pod's ``specon.io/state`` annotation (category, limit, predicted
    #: completion) from the heartbeats, on the leader (specon_manager/pod_state.py). Needs
    #: ``patch`` on pods, which the chart grants the manager.
    pod_state_annotation: bool = True
    #: A heartbeat whose ``time`` is further than this from the manager's clock is refused
    #: (422): a time far in the future would otherwise hide the node's later heartbeats.
    max_clock_skew_s: Positive = 300.0
    #: A heartbeat received within this long of its node's kept one may be found late (an
    #: older seq of the same agent boot, or a boot just replaced) and dropped; past it, the
    #: manager's receive order wins, so one heartbeat with a huge seq or a made-up boot id
    #: hides the node's real ones for at most this long. Keep it below the agents'
    #: ``heartbeat_s`` (10 s): then the next real heartbeat is always heard.
    heartbeat_reorder_window_s: Positive = 5.0

    # -- the algorithms' parameters (sent to every agent in each heartbeat reply) ---------------
    alpha: Positive = defaults.ALPHA
    interval_s: Positive = defaults.INTERVAL_S
    flowcon_alpha: Positive = defaults.FLOWCON_ALPHA
    flowcon_beta: Annotated[float, Field(ge=1, allow_inf_nan=False)] = defaults.FLOWCON_BETA
    weight_progressing: Positive = 2.0
    weight_watching: Positive = 1.5
    weight_converged: Positive = 1.0

    # -- the scheduling policy (specon.core.policy) ---------------------------------------------
    #: ``enforce`` (the default): act on every decision. ``observe``: decide everything as
    #: when enforcing and act on nothing: the extender lets every node pass with equal scores
    #: (the default scheduler decides), and a move is a ``WouldMigrate`` Event and
    #: ``specon_manager_would_migrations_total``, never a checkpoint request, an eviction or a
    #: reservation (docs/manager.md, "Observe mode"). The chart's ``mode`` sets it and the
    #: agents' ``enforcement`` alike.
    enforcement: Literal["enforce", "observe"] = "enforce"
    #: Its placement rule scores nodes in the extender; its move rule decides what moves:
    #: ``progress`` (the default, the one that ships: placement and moves by predicted
    #: completion), ``paper`` (the research's: Algorithm 4 on the agents' requests, Algorithm
    #: 5's rounds). Set the agents' ``policy`` to the same name (the chart does). An old name
    #: (``specon+flowcon``) is read as its new one, with a warning, until the next release.
    policy: str = defaults.POLICY

    # -- which pods are ours ------------------------------------------------------------------
    #: Pods with this scheduler name are training jobs (as are pods with the training label).
    scheduler_name: str = "specon"

    # -- Kubernetes ---------------------------------------------------------------------------
    #: Talk to the API server (migration, rebalancing, leader election). Off: extender and
    #: heartbeats only.
    kubernetes: bool = True
    #: A kubeconfig file; unset: in-cluster configuration.
    kubeconfig: Path | None = None
    #: The client-side rate limit on the manager's API requests (client-go's QPS and Burst):
    #: ``kube_burst`` at once, then ``kube_qps`` a second (specon_manager/rate_limit.py). A
    #: round reads from watch caches and sends a few requests; a migration a few dozen; so
    #: the limit is met only by a flood. client-go's 5/10 would slow a migration wave.
    kube_qps: Positive = 50.0
    kube_burst: int = Field(default=100, ge=1)

    # -- migration (Algorithm 4) ----------------------------------------------------------------
    migration: bool = True
    #: How long a job has to write and verify its checkpoint before the migration is cancelled.
    checkpoint_timeout_s: Positive = 180.0
    #: How long the replacement may take to be placed on the reserved target before the
    #: reservation is lifted (the job is then scheduled anywhere: never lost); as long again
    #: after that before the migration ends as failed (its pod left pending for the
    #: scheduler). Also the evicting phase's bound: not evicted by then, the move is cancelled.
    placement_timeout_s: Positive = 300.0
    #: How long after its grace period an evicted source pod may still be terminating before
    #: the manager reports it (event MigrationSourceStuck, with the way out); the replacement
    #: keeps waiting for it, so that a job never runs twice.
    source_stuck_after_s: Positive = 120.0
    #: At shutdown (SIGTERM) the leader ungates the bare pods' replacements waiting in phase
    #: placing (a manager removed for good would leave them gated for ever): it waits up to
    #: this long for evicted sources still terminating (0: hand nothing over). Keep it under
    #: the pod's terminationGracePeriodSeconds (30 s in the chart). docs/manager.md, Shutdown.
    shutdown_handover_s: float = Field(default=15.0, ge=0)
    #: Global rate limit: at most this many migrations start within ``migration_window_s``.
    max_migrations_per_window: int = Field(default=5, ge=0)
    migration_window_s: Positive = 60.0
    #: How often the controller reconciles migrations in flight.
    reconcile_period_s: Positive = 2.0
    #: What a migration is expected to cost a job (checkpoint, eviction, placement, restore),
    #: in seconds: a job whose reported slack is smaller is not moved (docs/manager.md, QoS).
    #: The progress policy's planner charges it only until a move of the job has been
    #: measured, then the job's own cost (``specon.io/move-cost-s``; docs/manager.md, "Move
    #: cost"); ``specon_manager_move_cost_seconds`` shows what the moves here cost.
    migration_cost_s: Positive = 120.0
    #: Move pods of single-replica ReplicaSets (Deployments) too. A ReplicaSet creates the new
    #: pod as soon as the old one terminates; only the extender's hold keeps it from running
    #: beside the old one while that one saves, so turn this on only when kube-scheduler's
    #: extender is not ``ignorable`` (the chart sets it from ``scheduler.extender.ignorable``).
    migrate_replicaset_pods: bool = False

    # -- rebalancing (Algorithm 5) ----------------------------------------------------------------
    rebalance: bool = True
    rebalance_period_s: Positive = 60.0
    min_balance: int = Field(default=1, ge=0)

    # -- high availability ----------------------------------------------------------------------
    leader_election: bool = False
    lease_name: str = "specon-manager"
    lease_namespace: str = "specon-system"
    #: This replica's identity in the Lease (the pod name in a cluster).
    identity: str = ""
    lease_duration_s: Positive = 15.0
    #: How often the Lease is renewed (on a thread of its own, never behind the loop's work).
    renew_period_s: Positive = 5.0
    #: A leader that has not renewed the Lease within this long (from when its last successful
    #: renewal was sent) stops acting and its writes are refused; below lease_duration_s,
    #: so it stops before another replica can take over. Unset: two thirds of it.
    renew_deadline_s: float | None = Field(default=None, gt=0)

    # -- the controller loop's supervision and health --------------------------------------------
    #: /readyz answers 503 when no pass of the controller loop has succeeded for this long
    #: (0: twice the loop's period, reconcile_period_s); a pass under way after a good one
    #: counts from its start.
    loop_stale_s: float = Field(default=0.0, ge=0)
    #: /healthz answers 503 when the loop has not turned at all (succeeded or failed) for this
    #: long, or its thread is gone: the kubelet then restarts the manager.
    loop_stall_s: Positive = 120.0
    #: After failed passes the loop waits its period doubled per failure, at most this long.
    loop_backoff_max_s: Positive = 10.0

    # -- fault injection (tests only) ---------------------------------------------------------
    #: Exit the process at once (status 137, like SIGKILL) right after a migration records
    #: this phase: how the tests kill the manager at each state. Never set in production.
    fault_exit_after_phase: str = ""

    # -- checks ---------------------------------------------------------------------------------
    @field_validator("policy")
    @classmethod
    def _policy_runs_here(cls, v: str) -> str:
        v = canonical(v)  # an old name: its new one, with a warning
        missing = missing_rules(lookup(v), placements=PLACEMENT_RULES, moves=MOVE_RULES)
        if missing:
            raise ValueError(f"policy {v!r}: the manager cannot run its {missing[0]}")
        return v

    @field_validator("agent_service_accounts")
    @classmethod
    def _accounts(cls, v: list[str]) -> list[str]:
        for sa in v:
            ns, _, name = sa.partition(":")
            if not ns or not name or ":" in name:
                raise ValueError(f"{sa!r} is not namespace:name")
        return v

    @property
    def agent_auth_mode(self) -> Literal["tokenreview", "static"]:
        if self.agent_auth != "auto":
            return self.agent_auth
        return "static" if self.tokens_file is not None or not self.kubernetes else "tokenreview"

    @model_validator(mode="after")
    def _tls_consistent(self) -> ManagerSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        if self.extender_client_ca_file is not None and (
                self.tls_cert_file is None or not self.extender_port):
            raise ValueError("extender_client_ca_file needs tls_cert_file and extender_port")
        if self.extender_client_names and self.extender_client_ca_file is None:
            raise ValueError("extender_client_names needs extender_client_ca_file")
        if self.extender_port and self.extender_port == self.port:
            raise ValueError("extender_port must differ from port")
        return self

    @model_validator(mode="after")
    def _lease_consistent(self) -> ManagerSettings:
        if self.leader_election and not (
                self.renew_period_s < self.lease_renew_deadline_s < self.lease_duration_s):
            raise ValueError(
                f"leader election needs renew_period_s < renew_deadline_s < lease_duration_s "
                f"(now {self.renew_period_s:g} < {self.lease_renew_deadline_s:g} < "
                f"{self.lease_duration_s:g})")
        return self

    @property
    def lease_renew_deadline_s(self) -> float:
        return (self.renew_deadline_s if self.renew_deadline_s is not None
                else self.lease_duration_s * 2 / 3)

    @model_validator(mode="after")
    def _auth_consistent(self) -> ManagerSettings:
        if self.agent_auth_mode == "tokenreview":
            if not self.kubernetes:
                raise ValueError("agent_auth tokenreview needs kubernetes")
            if not self.agent_service_accounts:
                raise ValueError("agent_auth tokenreview needs agent_service_accounts "
                                 "(the agents' ServiceAccount as namespace:name)")
        return self
