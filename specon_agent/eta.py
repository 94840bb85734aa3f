"""Each job's predicted completion (ETA): seconds until its run ends, at its recent step rate.

A job's run ends at its last step (``specon.io/total-steps``, or the SDK's total), or, when it
states a target loss and asks to stop there (``specon.io/stop-at-target``), when the learning
curve (specon/core/predict.py, through its :class:`~specon_agent.qos_tracker.JobQos`) says it
reaches that loss, if that comes first. A job with neither has no ETA (None): nothing says
where it ends.

The rate is the steps done over the last ``window_s`` of wall time (specon_agent/step_window.py,
the window the quality tracker keeps too): the rate the job runs at under its present limit, so
the ETA moves when its limit does. Steps
counted from records without step numbers do not count towards a total (an agent restart
would count them from zero again).

No I/O and no clock: the agent feeds (time, step) at every poll.
"""

from __future__ import annotations

import math

from .qos_tracker import JobQos
from .step_window import StepRate as StepRate  # the agent, the tests and the benchmark use it


def steps_eta_s(rate: StepRate, total_steps: int | None) -> float | None:
    """Seconds until step ``total_steps`` at the window's rate (None: no total, or no rate)."""
    if total_steps is None or rate.counted:
        return None
    r = rate.rate()
    if r is None or r <= 0:
        return None
    return max(0.0, total_steps - rate.step) / r


def eta_s(rate: StepRate, total_steps: int | None, qos: JobQos | None) -> float | None:
    """The job's ETA in seconds from the last sample (None: unknown); see the module's doc."""
    eta = steps_eta_s(rate, total_steps)
    if qos is not None:
        finish = qos.finish_s() if eta is None else None
        if finish is not None:
            eta = finish
        if qos.spec.stop_at_target:
            if qos.reached_at is not None:
                return 0.0  # asked to save and stop
            target = qos.target_s()[0]
            if target is not None and math.isfinite(target):
                eta = target if eta is None else min(eta, target)
    return eta
