"""The policy's node share step: each followed job's load, measured from its steps and CPU
(specon.core.job_loads.measured_load), then the policy's node share rule
(specon.core.node.NODE_SHARES) run over them by the node controller."""

from __future__ import annotations

from collections.abc import Mapping

from specon.core.categorize import Category
from specon.core.job_loads import measured_load
from specon.core.node import NODE_SHARES, NodeController
from specon.core.scoring import Weights

from .actuators import Actuator
from .cpu import CpuMeter
from .followed import FollowedJob, measure_demand, measured


def divide(jobs: Mapping[str, FollowedJob], control: NodeController, rule: str,
           weights: Weights, meter: CpuMeter, actuator: Actuator, now: float,
           first_steps_only: bool = False) -> None:
    """Run the policy's node share rule (specon.core.node.NODE_SHARES) over the jobs, from
    what each one's progress tells (specon.core.job_loads.measured_load). With
    ``first_steps_only``, only when some job's cost per step became measurable since the
    last run (until then it is served first, as FlowCon serves a new job). A job's cost
    per step is its CPU over its steps since the first step it reported (its start-up
    excluded: counted from arrival, a job seconds old looked many times longer than it
    is, and the order flipped as the estimate settled)."""
    if rule not in NODE_SHARES or not jobs:
        return
    if first_steps_only and not any(measured(j) and (j.load is None or j.load.work == 0)
                                    for j in jobs.values()):
        return
    cpus = actuator.node_cpus
    equal = cpus / len(jobs)
    loads = []
    for cid, job in jobs.items():
        job.count_equal_share(now, equal, cpus)
        view = control.jobs.get(cid)
        used = meter.usage_ns(cid)
        cpu_s, steps = 0.0, 0.0
        if measured(job) and used is not None and job.cpu1 is not None:
            assert job.step1 is not None
            cpu_s, steps = (used - job.cpu1) / 1e9, job.step - job.step1
        measure_demand(job, cid, now, used, cpus, meter, actuator)
        job.load = measured_load(cid, job.step, job.target.total_steps, cpu_s, cpus,
                                 view.cat.category if view else Category.PROGRESSING,
                                 job.fair_cpu_s, measured_steps=steps, cap=job.cap)
        loads.append(job.load)
    control.divide(rule, cpus, loads, weights)
