"""Simulation settings and results (plain data, JSON-ready). The policies are
specon.core.policy's."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from specon import defaults
from specon.core.scoring import Weights
from specon.core.speedup import INTERFERENCE, OVERSUBSCRIPTION_PENALTY


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Parameters of one simulated run. Defaults are the shipped ones (docs/parameters.md)."""

    alpha: float = defaults.ALPHA  # SpeCon threshold: normalised progress per minute
    interval_s: float = defaults.INTERVAL_S  # categorisation interval
    flowcon_alpha: float | None = None  # FlowCon threshold per core; None: same as alpha
    flowcon_beta: float = defaults.FLOWCON_BETA
    flowcon_max_itval_s: float = defaults.FLOWCON_MAX_INTERVAL_S
    weights: Weights = field(default_factory=Weights)
    restart_s: float = 3.0  # pod deletion + recreation + container start
    rebalance: bool = True
    min_balance: int = 1
    max_inflight_per_node: int = 1
    max_inflight_total: int = 4
    las_thresholds: tuple[float, ...] = (60.0, 600.0)  # core-seconds of attained service
    slaq_quantum: float = 0.25  # cores handed out per greedy step
    qos_floor_cores: float = defaults.QOS_FLOOR_CORES  # the agent's QoS floor (agent-qos)
    #: Under a node share rule (``progress``), the agent's QoS limits for jobs with a target
    #: or deadline override the rule's shares: the agent's ``qos_over_shares`` (the chart's
    #: ``agent.qosOverShares``), off as shipped (specon.core.node.qos_limits_over);
    #: benchmarks/qos_composition.py measures both (docs/results.md).
    qos_over_shares: bool = False
    #: What the progress-aware policy knows (robustness checks): relative error of each job's
    #: measured step cost, and the share of jobs that declare no total steps.
    cost_error: float = 0.0
    unknown_total_share: float = 0.0
    #: Noisier logs (specon.sim.noise), seen by every policy, never by the metrics: the
    #: relative sigma of each logged loss's extra multiplicative noise, the share of log lines
    #: that spike, and the height of one slow bump as a share of the loss's range.
    loss_noise: float = 0.0
    loss_spikes: float = 0.0
    loss_bump: float = 0.0
    #: Placement and moves see what the manager sees (specon_manager.state.node_loads): no
    #: speed-up table (each job linear up to the cores it keeps busy), a new job as the
    #: typical one (the median work left of the jobs on the nodes compared), and each node's
    #: per-core speed where its ``specon.io/cpu-speed`` label gives it (``labelled_speeds``),
    #: else as its agent measured it (specon_agent.speed_probe: ``measured_speeds``, the true
    #: speed off by up to ``speed_error`` of it, drawn per node), else 1.0 (a job's work in
    #: CPU-seconds of its own node). Off, they see the simulator's truth (speeds, tables, the
    #: new job's own work).
    manager_view: bool = False
    labelled_speeds: bool = True
    measured_speeds: bool = True
    speed_error: float = 0.15
    #: The share of an equal split every job keeps under the progress-aware policy.
    fair_share: float = 0.0
    #: A move must be predicted to gain this many times what it costs.
    move_margin: float = 1.0
    request_cpu: float = 0.1  # what the default scheduler counts for a pod without requests
    #: Node model (docs/node-model.md): throughput lost by threads squeezed onto fewer cores,
    #: and the slow-down from other jobs on the worker.
    oversubscription_penalty: float = OVERSUBSCRIPTION_PENALTY
    interference: float = INTERFERENCE
    record_timeline: bool = True

    def __post_init__(self) -> None:
        for name in ("alpha", "interval_s", "restart_s", "flowcon_beta", "slaq_quantum"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        for name in ("loss_noise", "loss_bump"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a number >= 0, got {v!r}")
        for name in ("loss_spikes", "unknown_total_share"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and 0 <= v <= 1):
                raise ValueError(f"{name} must be in [0, 1], got {v!r}")
        if not (isinstance(self.speed_error, int | float) and 0 <= self.speed_error < 1):
            raise ValueError(f"speed_error must be in [0, 1), got {self.speed_error!r}")
        for name in ("oversubscription_penalty", "interference", "cost_error"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and 0 <= v < 1):
                raise ValueError(f"{name} must be in [0, 1), got {v!r}")

    @property
    def flow_alpha(self) -> float:
        return self.flowcon_alpha if self.flowcon_alpha is not None else self.alpha


@dataclass(slots=True)
class JobResult:
    name: str
    profile: str
    submit_s: float
    start_s: float | None = None
    finish_s: float | None = None
    target_loss: float | None = None
    target_reached_s: float | None = None
    deadline_s: float | None = None
    reached_90_s: float | None = None
    migrations: list[dict[str, Any]] = field(default_factory=list)
    marked_s: float | None = None  # when SpeCon marked it migrated (moved or judged best)
    first_worker: str | None = None
    cpu_s: float = 0.0  # CPU-seconds it was given over its whole run (its limits' integral)

    @property
    def completion_s(self) -> float:
        assert self.finish_s is not None
        return self.finish_s - self.submit_s

    @property
    def met_target(self) -> bool:
        """Reached its target loss, within its deadline when it has one (DQoES's budget)."""
        if self.target_loss is None or self.target_reached_s is None:
            return False
        return self.deadline_s is None or (
            self.target_reached_s - self.submit_s <= self.deadline_s + 1e-9
        )

    @property
    def met_deadline(self) -> bool | None:
        if self.deadline_s is None or self.finish_s is None:
            return None
        return self.completion_s <= self.deadline_s + 1e-9

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["completion_s"] = self.completion_s if self.finish_s is not None else None
        d["time_to_90_s"] = (
            self.reached_90_s - self.submit_s if self.reached_90_s is not None else None
        )
        d["met_deadline"] = self.met_deadline
        d["met_target"] = self.met_target if self.target_loss is not None else None
        return d


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100); nan for no values."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass(slots=True)
class RunResult:
    policy: str
    seed: int | None
    jobs: list[JobResult]
    #: per worker: [(t, cores in use)] step function
    cpu: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    #: per job: [(t, worker or "", cores)] step function (when the timeline is recorded)
    shares: dict[str, list[tuple[float, str, float]]] = field(default_factory=dict)
    #: per worker: [(t, number of jobs)]
    counts: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    events: int = 0
    #: A bound, not a schedule (the oracle): only the average completion means something.
    bound: bool = False

    def summary(self) -> dict[str, float | int]:
        comp = [j.completion_s for j in self.jobs if j.finish_s is not None]
        t90 = [j.reached_90_s - j.submit_s for j in self.jobs if j.reached_90_s is not None]
        first = min(j.submit_s for j in self.jobs)
        last = max((j.finish_s or 0.0) for j in self.jobs)
        blank = self.bound
        return {
            "jobs": len(self.jobs),
            "avg_completion_s": sum(comp) / len(comp) if comp else math.nan,
            "p50_completion_s": math.nan if blank else percentile(comp, 50),
            "p95_completion_s": math.nan if blank else percentile(comp, 95),
            "max_completion_s": math.nan if blank else max(comp, default=math.nan),
            "makespan_s": math.nan if blank else last - first,
            # a bound's time to 90% is each job's earliest (specon.sim.oracle.ninety_bound)
            "avg_time_to_90_s": math.nan if not t90 else sum(t90) / len(t90),
            "migrations": sum(len(j.migrations) for j in self.jobs),
            "targets": sum(1 for j in self.jobs if j.target_loss is not None),
            "targets_met": sum(1 for j in self.jobs if j.met_target),
            "deadlines": sum(1 for j in self.jobs if j.deadline_s is not None),
            "deadlines_met": sum(1 for j in self.jobs if j.met_deadline),
        }
