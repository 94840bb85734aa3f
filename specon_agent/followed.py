"""What the agent knows of each job it follows (:class:`FollowedJob`): its progress source,
the steps and CPU counters its cost per step is measured from, and the measures the node share
rule reads of it: what it showed it can use (:func:`measure_demand`) and how far it is behind
equal shares (:meth:`FollowedJob.count_equal_share`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specon.core.job_loads import DEMAND_MIN_WINDOW_S, demand_cap
from specon.core.progress import JobLoad

from .actuators import Actuator, ActuatorError
from .checkpoints import Proof
from .cpu import CpuMeter
from .discovery import Target
from .eta import StepRate
from .progress import ProgressSource
from .qos_tracker import JobQos


def measured(job: FollowedJob) -> bool:
    """Whether the job has run a step since the first one it reported (its cost per step can
    be measured)."""
    return job.step1 is not None and job.step > job.step1


@dataclass
class FollowedJob:
    """A job the agent follows, as the loop knows it (one per container, by its id)."""

    target: Target
    source: ProgressSource | None
    arrived: float = 0.0
    cpu0: int | None = None  # its CPU counter when it arrived (ns)
    step: float = 0.0  # the last step it reported (records counted when it gives none)
    step0: float = 0.0  # its step when the agent found it (what it logged before)
    #: Its step and CPU counter (ns) at the first step it reported after it was found: its
    #: cost per step is measured from there, so its start-up (imports, data, model) is not
    #: taken for training work; None until then.
    step1: float | None = None
    cpu1: int | None = None
    load: JobLoad | None = None  # what the policy last knew of it (node share rules)
    #: The most cores it showed it can use (specon.core.job_loads.demand_cap; None: not known,
    #: the node's), and since when (monotonic s) and from which CPU counter (ns) its use under
    #: its present limit is measured (reset when its limit changes).
    cap: float | None = None
    #: CPU-seconds an equal share of the node would have given it since its first step, and
    #: when that was last added to (monotonic s): how far behind equal shares it is
    #: (specon.core.progress.behind_equal_share).
    fair_cpu_s: float = 0.0
    fair_mark: float | None = None
    demand_mark: tuple[float, int, int | None] | None = None
    stats_seen: tuple[int, int, int] = (0, 0, 0)  # rotations, truncations, bytes
    refusal_seen: bool = False  # its progress file was refused (counted once)
    asked: bool = False  # a reallocation was asked (standalone: said once)
    proof: Proof = field(default_factory=Proof)  # its checkpoint folder as last read
    qos: JobQos | None = None  # its target / deadline, when the pod states one
    threads_hint: int | None = None  # the thread count last written into its threads.json
    ending: bool = False  # its pod is being deleted (discovery's Ending)
    rate: StepRate = field(default_factory=StepRate)  # its recent steps, for its ETA (eta.py)

    def count_equal_share(self, now: float, equal: float, cpus: float) -> None:
        """Add what an equal share of the node (``equal`` cores of ``cpus``) would have given
        it since the last call, while its cost per step is measured (fair_cpu_s)."""
        if self.fair_mark is not None:
            self.fair_cpu_s += (now - self.fair_mark) * min(equal, self.cap or cpus)
        self.fair_mark = now if measured(self) else None


def measure_demand(job: FollowedJob, cid: str, now: float, used: int | None, cpus: float,
                   meter: CpuMeter, actuator: Actuator) -> None:
    """What the job showed it can use since its limit last changed (or since the last
    measurement), over DEMAND_MIN_WINDOW_S at least, and how long it waited for a CPU
    meanwhile: its cap for the share rule (demand_cap)."""
    if used is None:
        return
    mark, waited = job.demand_mark, meter.wait_ns(cid)
    if mark is None or used < mark[1]:
        job.demand_mark = (now, used, waited)
        return
    if now - mark[0] < DEMAND_MIN_WINDOW_S:
        return
    try:
        limit = actuator.read(cid).cores
    except ActuatorError:
        return
    window = now - mark[0]
    share = (None if waited is None or mark[2] is None or waited < mark[2]
             else (waited - mark[2]) / 1e9 / window)
    job.cap = demand_cap((used - mark[1]) / 1e9 / window, limit, cpus, share)
    job.demand_mark = (now, used, waited)
