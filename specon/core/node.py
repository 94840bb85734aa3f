"""The node controller: one node's FlowCon lists and limits (Algorithms 1-2), its SpeCon
categories (Algorithm 3), its quality-target limits and each job's loss track.

One object per node, driven the same way by the agent (one per real node) and by the
simulator (one per simulated worker): jobs arrive and depart, losses are added as they are
logged, and at each interval the caller hands in the time and each job's cumulative CPU
counter. No I/O and no clock: it returns limits and reallocation requests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from specon.core import flowcon
from specon.core.categorize import Category, JobState, categorize
from specon.core.flowcon import FlowConParams, FlowConState, FlowList
from specon.core.growth import Growth, LossTrack
from specon.core.progress import JobLoad, node_shares
from specon.core.scoring import Weights
from specon.core.urgency import Assessment, prioritised, qos_limits

#: A cumulative CPU counter (in the controller's unit; None: unknown).
Counter = int | float | None

#: A node share rule (a policy's ``share``): the cores each job may use on a node of ``cpus``
#: CPUs, from what the policy knows of its jobs (``fair``: the share of an equal split every
#: job keeps at least, 0 as shipped). FlowCon ("equal" share with ``flowcon``) and the QoS
#: limits are the controller's own; these rules replace FlowCon's limits.
NodeShare = Callable[[float, Sequence[JobLoad], Weights, float], dict[str, float]]
NODE_SHARES: dict[str, NodeShare] = {}


def register_share(name: str) -> Callable[[NodeShare], NodeShare]:
    """Register a node share rule under ``name``: the agent and the simulator both run it."""
    def deco(fn: NodeShare) -> NodeShare:
        NODE_SHARES[name] = fn
        return fn
    return deco


def qos_limits_over(share_rule: str, over_shares: bool = False) -> bool:
    """Whether the QoS limits (docs/qos.md) are laid over a policy's node limits: over
    FlowCon's and equal shares, yes; over a node share rule's (:data:`NODE_SHARES`) only when
    ``over_shares`` asks for it. The progress rule already serves the least work left first
    and keeps its starvation guard; limits laid over it took a job of an overloaded node to
    4.3 times its default completion and time to 90% to +17% (docs/qos.md, "Under the
    shipped policy"). Without them a job's target and deadline are still judged, reported,
    hold its moves and stop it at its target."""
    return over_shares or share_rule not in NODE_SHARES


@register_share("progress")
def _progress(cpus: float, jobs: Sequence[JobLoad], weights: Weights,
              fair: float) -> dict[str, float]:
    """The progress-aware policy's division (specon.core.progress.node_shares)."""
    return node_shares(cpus, jobs, weights, fair=fair)


@dataclass
class Probe:
    """One algorithm's view of a job between two of its ticks."""

    t: float
    cpu: Counter = None  # the job's cumulative CPU counter at ``t``
    track: LossTrack = field(default_factory=LossTrack)
    samples: list[float] = field(default_factory=list)

    def restart(self, now: float, cpu: Counter) -> None:
        """Start a new interval at ``now`` (the job (re)started on this node)."""
        self.t, self.cpu = now, cpu

    def observe(self, now: float, cpu: Counter, per_second: float) -> tuple[Growth | None, bool]:
        """Close the interval at ``now``: (growth, whether the CPU use over it is known).
        ``per_second``: counter units per CPU-second."""
        known = cpu is not None and self.cpu is not None and cpu >= self.cpu
        cpu_s = (cpu - self.cpu) / per_second if known else 0.0  # type: ignore[operator]
        self.track, g = self.track.observe(self.samples, now - self.t, cpu_s)
        self.samples = []
        self.t = now
        self.cpu = cpu
        return g, known


@dataclass
class JobView:
    """What the controller knows of one job (the agent reports it in heartbeats and metrics).
    A job that moves takes its view along (the simulator hands it to the next node)."""

    flow: Probe
    cat_probe: Probe
    cat: JobState = field(default_factory=JobState)
    efficiency: float | None = None  # last FlowCon measurement
    growth: Growth | None = None  # last categorisation measurement
    cores: float = 0.0  # CPU use over the last FlowCon interval
    loss: float | None = None

    @classmethod
    def new(cls, now: float, cpu: Counter = None) -> JobView:
        return cls(flow=Probe(now, cpu), cat_probe=Probe(now, cpu))


class NodeController:
    """FlowCon, Algorithm 3 and the quality-target limits for the jobs of one node."""

    def __init__(self, params: FlowConParams, alpha: float, per_second: float = 1.0) -> None:
        self.params = params
        self.alpha = alpha
        #: Units of the CPU counters per CPU-second (the agent's are nanoseconds).
        self.per_second = per_second
        self.flow = FlowConState(itval_s=params.itval_s)
        self.jobs: dict[str, JobView] = {}
        #: When the next FlowCon interval is due (inf: no job).
        self.flow_due = math.inf
        #: Set whenever the limits may have changed and must be applied.
        self.dirty = False
        #: Limits the quality targets and deadlines decided (:meth:`judge_qos`); they replace
        #: FlowCon's for those jobs. ``qos_floor``: the lowest such a limit goes; ``first``:
        #: the jobs given the CPU first (docs/qos.md).
        self.qos_limits: dict[str, float] = {}
        self.qos_floor = 0.0
        self.first: frozenset[str] = frozenset()
        #: Limits a node share rule decided (:meth:`divide`); they replace FlowCon's.
        self.shares: dict[str, float] = {}

    # -- parameters (from the manager) --------------------------------------------------------
    def set_parameters(self, alpha: float, flow_alpha: float, beta: float) -> bool:
        if (alpha, flow_alpha, beta) == (self.alpha, self.params.alpha, self.params.beta):
            return False
        self.alpha = alpha
        self.params = replace(self.params, alpha=flow_alpha, beta=beta)
        return True

    # -- listener (Algorithm 2) ---------------------------------------------------------------
    def arrive(self, cid: str, now: float, cpu: Counter, view: JobView | None = None) -> None:
        """A job starts on the node (``view``: the state it brings from another node)."""
        if cid in self.jobs:
            return
        if view is None:
            view = JobView.new(now, cpu)
        else:
            view.flow.restart(now, cpu)
            view.cat_probe.restart(now, cpu)
            # its pace elsewhere says nothing of its pace here
            view.cat = replace(view.cat, top_pace=None, slow=0, limit=None)
        self.jobs[cid] = view
        self.flow = flowcon.add_container(self.flow, cid, self.params)
        self._listener(now)

    def depart(self, cid: str, now: float) -> JobView | None:
        """A job leaves the node; returns its view (None: it was not here)."""
        view = self.jobs.pop(cid, None)
        if view is None:
            return None
        self.qos_limits.pop(cid, None)
        self.shares.pop(cid, None)
        self.flow = flowcon.remove_container(self.flow, cid, self.params)
        self._listener(now)
        return view

    def _listener(self, now: float) -> None:
        """Reset the interval to its base and recompute the limits at once, from the latest
        efficiencies, without reclassifying (a few seconds of log are not an interval); the
        next classification comes at most one base interval later, so a stream of arrivals
        cannot postpone it forever."""
        eff = {cid: j.efficiency for cid, j in self.jobs.items()}
        self.flow = flowcon.step(self.flow, eff, self.params, classify=False)
        self.dirty = True
        if not self.flow.lists:
            self.flow_due = math.inf
            return
        self.flow_due = min(self.flow_due, now + self.flow.itval_s)

    # -- progress -----------------------------------------------------------------------------
    def prime(self, cid: str, history: list[float]) -> None:
        """The losses a job logged before the agent saw it (a job already running when the agent
        starts). They set the job's scale (first value to lowest, docs/normalisation.md) without
        counting as an interval: otherwise a job found late would be judged against only the
        noise of its plateau, and every wiggle would look like progress."""
        job = self.jobs.get(cid)
        finite = [v for v in history if math.isfinite(v)]
        if job is None or len(finite) < 2:
            self.add_losses(cid, history)
            return
        head = max(1, len(finite) // 10)
        track, _ = LossTrack().observe(finite[:head], 0.0, 0.0)
        track, _ = track.observe(finite[head:], 0.0, 0.0)
        for probe in (job.flow, job.cat_probe):
            probe.track = track
        job.loss = finite[-1]

    def add_losses(self, cid: str, losses: list[float]) -> None:
        job = self.jobs.get(cid)
        if job is None or not losses:
            return
        job.flow.samples.extend(losses)
        job.cat_probe.samples.extend(losses)
        finite = [v for v in losses if math.isfinite(v)]
        if finite:
            job.loss = finite[-1]

    # -- intervals ----------------------------------------------------------------------------
    def measure(self, now: float, cpu: Mapping[str, Counter]) -> dict[str, float | None]:
        """Close one efficiency interval of every job: its growth efficiency (None: no
        measurement, or no real CPU figure)."""
        eff: dict[str, float | None] = {}
        for cid, job in self.jobs.items():
            g, cpu_known = job.flow.observe(now, cpu.get(cid), self.per_second)
            if g is not None and cpu_known:
                job.cores = g.cores
                job.efficiency = g.efficiency
                eff[cid] = g.efficiency
            else:
                eff[cid] = None
        return eff

    def flow_tick(self, now: float, cpu: Mapping[str, Counter]) -> None:
        """Algorithm 1: one FlowCon interval over every job."""
        self.flow = flowcon.step(self.flow, self.measure(now, cpu), self.params)
        self.dirty = True
        self.flow_due = now + self.flow.itval_s if self.flow.lists else math.inf

    def categorize_tick(self, now: float, cpu: Mapping[str, Counter],
                        limits_applied: bool = True) -> tuple[str, ...]:
        """Algorithm 3: one categorisation interval; returns the jobs to reallocate now.
        ``limits_applied`` False (an agent in observe mode): the limits were not written, so
        a cut in them held no job back."""
        growth: dict[str, float | None] = {}
        invalid: dict[str, int] = {}
        pace: dict[str, float] = {}
        for cid, job in self.jobs.items():
            g, _ = job.cat_probe.observe(now, cpu.get(cid), self.per_second)
            if g is not None:
                job.growth = g
                pace[cid] = g.pace
            growth[cid] = g.progress if g is not None else None
            invalid[cid] = job.cat_probe.track.invalid
        res = categorize({cid: j.cat for cid, j in self.jobs.items()}, growth, self.alpha,
                         invalid, pace=pace, limits=self.limits if limits_applied else None)
        for cid, st in res.states.items():
            if st.last_growth is None and self.jobs[cid].cat.last_growth is not None:
                self.jobs[cid].growth = None  # no valid loss: its last growth is not current
            self.jobs[cid].cat = st
        return res.reallocation_requests

    def mark_migrated(self, cid: str) -> None:
        job = self.jobs.get(cid)
        if job is not None:
            job.cat = replace(job.cat, migrated=True)

    # -- a policy's node share rule ---------------------------------------------------------------
    def divide(self, rule: str, cpus: float, jobs: Sequence[JobLoad],
               weights: Weights, fair: float = 0.0) -> dict[str, float]:
        """Run the node share rule ``rule`` (:data:`NODE_SHARES`) over the node's jobs: returns
        each job's cores and keeps them, as fractions of the node, as :attr:`shares`. A rule
        never sees an empty node."""
        cores = NODE_SHARES[rule](cpus, jobs, weights, fair) if jobs else {}
        shares = {cid: min(1.0, c / cpus) for cid, c in cores.items() if cid in self.jobs}
        if shares != self.shares:
            self.shares = shares
            self.dirty = True
        return cores

    # -- quality targets and deadlines (docs/qos.md) --------------------------------------------
    def judge_qos(self, judged: Mapping[str, Assessment | None], cpus: float,
                  floor_cores: float, limit: bool = True) -> tuple[dict[str, float | None], bool]:
        """The node's QoS limits from each job's assessment (None: the job states no target or
        deadline): who gets the CPU first, then the strict-priority division
        (specon.core.urgency). Returns every job's limit (None: FlowCon's stands) and whether
        the set ones (kept as :attr:`qos_limits`) changed. With no job judged nothing changes;
        with ``limit`` False (:func:`qos_limits_over`) no job gets a QoS limit."""
        if not limit:
            self.first = frozenset()
            return dict.fromkeys(judged), self.set_qos_limits({}, self.qos_floor)
        if not any(a is not None for a in judged.values()):
            return dict.fromkeys(judged), False
        floor = min(1.0, floor_cores / cpus)
        self.first = prioritised(judged, cpus, self.first)
        limits = qos_limits(judged, cpus, floor, self.first)
        changed = self.set_qos_limits({c: v for c, v in limits.items() if v is not None}, floor)
        return limits, changed

    def set_qos_limits(self, limits: Mapping[str, float], floor: float) -> bool:
        """Replace the QoS overrides; True (and dirty) when they changed."""
        new = {cid: v for cid, v in limits.items() if cid in self.jobs}
        if new == self.qos_limits and floor == self.qos_floor:
            return False
        self.qos_limits, self.qos_floor = new, floor
        self.dirty = True
        return True

    # -- views --------------------------------------------------------------------------------
    @property
    def limits(self) -> Mapping[str, float]:
        """Each job's limit: QoS over the share rule's over FlowCon's."""
        if not self.qos_limits and not self.shares:
            return self.flow.limits
        return {**self.flow.limits, **self.shares, **self.qos_limits}

    @property
    def floor(self) -> float:
        """The lowest limit the actuator may write (a share rule keeps its own floor)."""
        flow = 0.0 if self.shares else self.flow.floor(self.params)
        return min(flow, self.qos_floor) if self.qos_limits else flow

    def flow_list(self, cid: str) -> FlowList | None:
        return self.flow.lists.get(cid)

    def counts(self) -> dict[Category, int]:
        out = dict.fromkeys(Category, 0)
        for job in self.jobs.values():
            out[job.cat.category] += 1
        return out
