"""Quality targets and deadlines on one node (DQoES and the QoS-oriented scheduler, issue 7).

For each job whose pod states a target loss or a deadline (specon/qos_annotations.py), the
agent keeps its (step, loss) history and its step rate and CPU use over a recent window; at
every QoS tick it fits the learning curve (specon/core/predict.py), predicts when the job
reaches its target and when it finishes, judges where it stands (specon/core/urgency.py:
``assess``) and turns the node's judgements into CPU limits (``qos_limits``) that override
FlowCon's for those jobs.

No I/O and no clock: the agent feeds records, CPU counters and the time.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from specon.core.predict import Prediction, fit_curve, predict
from specon.core.urgency import Assessment, assess
from specon.qos_annotations import QosSpec

from .step_window import StepRate

#: At most this many (step, loss) points are kept per job; beyond it every other one is
#: dropped (the fit needs the curve's shape, not every record).
MAX_POINTS = 2000
#: A target counts as reached when the mean of this many last losses is at or below it.
REACHED_OVER = 5


@dataclass
class JobQos:
    """One job's quality spec, its history and the last judgement."""

    spec: QosSpec
    created: float  # seconds since the epoch
    window_s: float = 30.0
    points: list[tuple[float, float]] = field(default_factory=list)
    #: Its steps and CPU counter over the last ``window_s`` (made from ``window_s``).
    window: StepRate = field(init=False)
    step: float = 0.0  # the last step seen (records counted when the log gives no step)
    counted: bool = False  # steps are counted records (the log carries no step numbers)
    last_losses: deque[float] = field(default_factory=lambda: deque(maxlen=REACHED_OVER))
    reached_at: float | None = None
    stop_asked: bool = False
    assessment: Assessment | None = None
    prediction: Prediction | None = None
    peak_cores: float = 0.0  # the most it was seen using over a window

    def __post_init__(self) -> None:
        self.window = StepRate(self.window_s)

    def best_cores(self, node_cpus: float) -> float:
        """The cores the job could use: a quarter above the most it was seen using, at least
        one (a job seen only under contention may use more; it then shows it)."""
        return min(node_cpus, max(1.0, 1.25 * self.peak_cores))

    @property
    def deadline(self) -> float | None:
        return None if self.spec.deadline_s is None else self.created + self.spec.deadline_s

    def add(self, now: float, steps: list[int | None], losses: list[float]) -> None:
        for k, loss in zip(steps, losses, strict=True):
            if k is None:
                self.counted = True
                self.step += 1
            else:
                self.step = max(self.step, float(k))
            if not math.isfinite(loss):
                continue
            self.points.append((self.step, loss))
            self.last_losses.append(loss)
        if len(self.points) > MAX_POINTS:
            self.points = self.points[::2]
        t = self.spec.target_loss
        if (t is not None and self.reached_at is None and len(self.last_losses) == REACHED_OVER
                and sum(self.last_losses) / REACHED_OVER <= t):
            self.reached_at = now

    def sample(self, now: float, cpu_ns: int | None) -> None:
        if not self.points:
            return  # still starting (imports, data loading): CPU used, no step yet
        self.window.record(now, self.step, cpu_ns)

    def rate(self) -> tuple[float, float | None]:
        """(steps per second, cores used) over the window; cores None when unknown."""
        rate = self.window.rate()
        if rate is None:
            return 0.0, None  # too short a span to trust
        return rate, self.window.cores()

    def judge(self, now: float, best_cores: float) -> Assessment:
        """Predict and assess (also kept in ``prediction`` and ``assessment``)."""
        rate, cores = self.rate()
        self.peak_cores = max(self.peak_cores, cores or 0.0)
        spec = self.spec
        total = None if spec.total_steps is None or self.counted else float(spec.total_steps)
        fit = fit_curve([p[0] for p in self.points], [p[1] for p in self.points]) \
            if spec.target_loss is not None and self.reached_at is None else None
        self.prediction = predict(fit, self.step, total if total is not None else math.inf,
                                  rate, spec.target_loss)
        deadline = self.deadline
        left = math.inf if deadline is None else deadline - now
        steps_left: float | None
        if spec.target_loss is not None:
            step_at = fit.step_for(spec.target_loss) if fit is not None else None
            steps_left = None if step_at is None else max(0.0, step_at - self.step)
        elif total is not None:
            steps_left = max(0.0, total - self.step)
        else:
            steps_left = None
        if cores is None:
            # No CPU figure: judge by the rate alone, as if the job used what it may.
            cores = best_cores
        self.assessment = assess(steps_left, rate, cores, best_cores, left,
                                 reached=self.reached_at is not None)
        return self.assessment

    def finish_s(self) -> float | None:
        p = self.prediction
        return None if p is None or not math.isfinite(p.finish_s) or self.rate()[0] <= 0 \
            else p.finish_s

    def target_s(self) -> tuple[float | None, float | None, float | None]:
        """(estimate, low, high) seconds to the target; None where unknown or never."""
        p = self.prediction
        if p is None or self.reached_at is not None or self.rate()[0] <= 0:
            return None, None, None

        def finite(v: float | None) -> float | None:
            return v if v is not None and math.isfinite(v) else None

        return finite(p.target_s), finite(p.target_low_s), finite(p.target_high_s)
