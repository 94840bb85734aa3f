"""Discrete-event simulator of a cluster running training jobs under one scheduling policy.

It runs the core algorithms unchanged (growth, FlowCon, Algorithms 3-5): the simulator is just
another adapter that turns simulated progress into their inputs and applies their decisions.
Each worker has the node controller the agent runs on a real node (specon.core.node).

Model (workload-format.md): a job on a worker runs at
``speedup(cores) * worker.speed / (cpu_seconds_per_iteration * work_scale)`` iterations per
second; a worker's CPUs are shared work-conservingly (equal CFS shares by default), capped by
each container's limit and by the cores the job can use; a migration stops the job for
checkpoint + restore + pod restart; the loss at a given progress comes from the profile.

The parts, by role: ``loop`` (Simulator: the events), ``bookkeeping`` (each job and worker,
advanced between events), ``inputs`` (what a policy sees, in the core's terms), ``rules``
(the share, placement and move rules by name), ``moves`` (the moves the core decides),
``results`` (the timelines and results a run leaves).
"""

from specon.sim.engine.loop import Simulator
from specon.sim.engine.rules import MOVES, PLACEMENTS, SHARE_RULES, ShareRule, register_share

__all__ = ["MOVES", "PLACEMENTS", "SHARE_RULES", "ShareRule", "Simulator", "register_share"]
