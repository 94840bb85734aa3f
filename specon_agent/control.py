"""The node's control state: FlowCon lists and limits, SpeCon categories, and each job's loss
track, driven exactly as the simulator drives them (specon/sim/engine.py: ``_flow_listener``,
``_flow_tick``, ``_categorize``), so that the agent and the simulator behave the same.

No I/O and no clock: the agent feeds loss values, cumulative CPU counters and the time; this
returns limits and reallocation requests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from specon.core import flowcon
from specon.core.categorize import Category, JobState, categorize
from specon.core.flowcon import FlowConParams, FlowConState, FlowList
from specon.core.growth import Growth, LossTrack


@dataclass
class Probe:
    """One algorithm's view of a job between two of its ticks."""

    t: float
    cpu_ns: int | None = None  # the job's cumulative CPU time at ``t`` (None: unknown)
    track: LossTrack = field(default_factory=LossTrack)
    samples: list[float] = field(default_factory=list)

    def observe(self, now: float, cpu_ns: int | None) -> tuple[Growth | None, bool]:
        """Close the interval at ``now``: (growth, whether the CPU use over it is known)."""
        cpu_known = cpu_ns is not None and self.cpu_ns is not None and cpu_ns >= self.cpu_ns
        cpu_s = (cpu_ns - self.cpu_ns) / 1e9 if cpu_known else 0.0  # type: ignore[operator]
        self.track, g = self.track.observe(self.samples, now - self.t, cpu_s)
        self.samples = []
        self.t = now
        self.cpu_ns = cpu_ns
        return g, cpu_known


@dataclass
class JobView:
    """What the agent knows of one job (reported in heartbeats and metrics)."""

    flow: Probe
    cat_probe: Probe
    cat: JobState = field(default_factory=JobState)
    efficiency: float | None = None  # last FlowCon measurement
    growth: Growth | None = None  # last categorisation measurement
    cores: float = 0.0  # CPU use over the last interval
    loss: float | None = None


class NodeControl:
    """FlowCon and Algorithm 3 for the jobs of one node."""

    def __init__(self, params: FlowConParams, alpha: float) -> None:
        self.params = params
        self.alpha = alpha
        self.flow = FlowConState(itval_s=params.itval_s)
        self.jobs: dict[str, JobView] = {}
        self.flow_due = math.inf
        #: Set whenever the limits may have changed and must be applied.
        self.dirty = False
        #: Limits the quality targets and deadlines decided (specon_agent/qos.py); they
        #: replace FlowCon's for those jobs. ``qos_floor``: the lowest such a limit goes.
        self.qos_limits: dict[str, float] = {}
        self.qos_floor = 0.0

    # -- parameters (from the manager) --------------------------------------------------------
    def set_parameters(self, alpha: float, flow_alpha: float, beta: float) -> bool:
        if (alpha, flow_alpha, beta) == (self.alpha, self.params.alpha, self.params.beta):
            return False
        self.alpha = alpha
        self.params = replace(self.params, alpha=flow_alpha, beta=beta)
        return True

    # -- listener (Algorithm 2) ---------------------------------------------------------------
    def arrive(self, cid: str, now: float, cpu_ns: int | None) -> None:
        if cid in self.jobs:
            return
        self.jobs[cid] = JobView(flow=Probe(now, cpu_ns), cat_probe=Probe(now, cpu_ns))
        self.flow = flowcon.add_container(self.flow, cid, self.params)
        self._listener(now)

    def depart(self, cid: str, now: float) -> bool:
        if self.jobs.pop(cid, None) is None:
            return False
        self.qos_limits.pop(cid, None)
        self.flow = flowcon.remove_container(self.flow, cid, self.params)
        self._listener(now)
        return True

    def _listener(self, now: float) -> None:
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
    def flow_tick(self, now: float, cpu_ns: Mapping[str, int | None]) -> None:
        """Algorithm 1: one FlowCon interval over every job."""
        eff: dict[str, float | None] = {}
        for cid, job in self.jobs.items():
            g, cpu_known = job.flow.observe(now, cpu_ns.get(cid))
            if g is not None and cpu_known:
                job.cores = g.cores
                job.efficiency = g.efficiency
                eff[cid] = g.efficiency
            else:
                # Without a real CPU figure there is no efficiency: no measurement this time.
                eff[cid] = None
        self.flow = flowcon.step(self.flow, eff, self.params)
        self.dirty = True
        self.flow_due = now + self.flow.itval_s if self.flow.lists else math.inf

    def categorize_tick(self, now: float, cpu_ns: Mapping[str, int | None]) -> tuple[str, ...]:
        """Algorithm 3: one categorisation interval; returns the jobs to reallocate now."""
        growth: dict[str, float | None] = {}
        for cid, job in self.jobs.items():
            g, _ = job.cat_probe.observe(now, cpu_ns.get(cid))
            if g is not None:
                job.growth = g
            growth[cid] = g.progress if g is not None else None
        res = categorize({cid: j.cat for cid, j in self.jobs.items()}, growth, self.alpha)
        for cid, st in res.states.items():
            self.jobs[cid].cat = st
        return res.reallocation_requests

    def mark_migrated(self, cid: str) -> None:
        job = self.jobs.get(cid)
        if job is not None:
            job.cat = replace(job.cat, migrated=True)

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
        if not self.qos_limits:
            return self.flow.limits
        return {**self.flow.limits, **self.qos_limits}

    @property
    def floor(self) -> float:
        flow = self.flow.floor(self.params)
        return min(flow, self.qos_floor) if self.qos_limits else flow

    def flow_list(self, cid: str) -> FlowList | None:
        return self.flow.lists.get(cid)

    def counts(self) -> dict[Category, int]:
        out = dict.fromkeys(Category, 0)
        for job in self.jobs.values():
            out[job.cat.category] += 1
        return out
