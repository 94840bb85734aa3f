"""``specon whatif``'s model of the live cluster: the manager's ``/status/whatif-input`` reply
(validated; an error names the field) turned into a simulator workload of the work left from
now, and the comparison of ``default`` with the shipped policy on it. No I/O."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specon.core.job_loads import steps_left
from specon.core.predict import fit_curve
from specon.cpu_speed import DEFAULT_SPEED, MAX_SPEED, MIN_SPEED
from specon.sim.model import SimConfig
from specon.wire import WHATIF_INPUT_FORMAT, latest_reports
from specon.workload.models import Workload

FORMAT = WHATIF_INPUT_FORMAT
#: Points of the loss curve given to each job's profile (evenly spaced over the work left).
LOSS_POINTS = 50
#: What a checkpoint and a restore are assumed to cost when the manager does not say what it
#: charges a move (``move_cost_s``: a manager older than that field). The manager measures
#: each job's own move cost (``specon.io/move-cost-s`` on its owner), but its reply carries
#: only the default: the owners are not kept in the manager's memory.
CHECKPOINT_S = 1.0
#: The part of a move that is neither checkpoint nor restore: the simulator's pod deletion,
#: re-creation and container start (SimConfig.restart_s).
RESTART_S = SimConfig().restart_s
#: Without a fitted curve the loss is assumed to fall as step^-DECAY from its current value.
DECAY = 0.5
MAX_JOBS = 20_000

Finite = Annotated[float, Field(allow_inf_nan=False)]
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Cores = Annotated[float, Field(gt=0, le=100_000, allow_inf_nan=False)]


class BadReply(ValueError):
    """The manager's reply is not what ``specon whatif`` reads; the message names the field."""


class _In(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class NodeIn(_In):
    name: Annotated[str, Field(min_length=1, max_length=253)]
    cpus: Cores
    fresh: bool = True
    #: Its specon.io/cpu-speed label (specon.cpu_speed), else its agent's measured speed;
    #: None: neither, taken at 1.
    speed: Annotated[float, Field(ge=MIN_SPEED, le=MAX_SPEED, allow_inf_nan=False)] | None = None


class JobIn(_In):
    namespace: Annotated[str, Field(min_length=1, max_length=253)]
    pod: Annotated[str, Field(min_length=1, max_length=253)]
    node: Annotated[str, Field(min_length=1, max_length=253)]
    fresh: bool = True
    step: Annotated[int, Field(ge=0)] | None = None
    total_steps: Annotated[int, Field(gt=0)] | None = None
    work_s: NonNeg | None = None
    work_done_s: NonNeg | None = None
    demand_cores: Cores | None = None
    loss: Finite | None = None
    checkpointable: bool = False
    target_loss: Finite | None = None
    deadline: NonNeg | None = None
    reported: NonNeg = 0.0
    losses: Annotated[list[tuple[Annotated[int, Field(ge=0)], Finite]],
                      Field(max_length=1000)] = []


class WhatifInput(_In):
    format: str = FORMAT
    time: NonNeg
    nodes: Annotated[list[NodeIn], Field(max_length=100_000)]
    jobs: Annotated[list[JobIn], Field(max_length=MAX_JOBS)]
    #: What the manager's planner charges a move (seconds); None: an older manager.
    move_cost_s: Annotated[float, Field(ge=0, le=86_400, allow_inf_nan=False)] | None = None


def parse(data: Any) -> WhatifInput:
    """The reply, validated: :class:`BadReply` naming the first bad field."""
    if isinstance(data, dict) and data.get("format", FORMAT) != FORMAT:
        raise BadReply(f"format: {str(data.get('format'))[:40]!r} is not {FORMAT!r} (a "
                       "manager of another release?)")
    try:
        return WhatifInput.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(p) for p in e["loc"]) or "reply"
        raise BadReply(f"{where}: {e['msg']}") from None


def _loss_curve(j: JobIn, step: int, left: int) -> tuple[list[float], str]:
    """The loss over the steps left, evenly spaced, and how it was had."""
    at = [step + left * i / (LOSS_POINTS - 1) for i in range(LOSS_POINTS)]
    pts = [(s, v) for s, v in j.losses if s <= step]
    fit = fit_curve([s for s, _ in pts], [v for _, v in pts]) if len(pts) >= 5 else None
    if fit is not None:
        vals = [fit.loss_at(s) for s in at]
        if all(math.isfinite(v) for v in vals):
            return vals, "fitted"
    base = j.loss if j.loss is not None else 1.0
    s0 = max(step, 1)
    return [base * (s0 / max(s, 1.0)) ** DECAY for s in at], "assumed"


def to_workload(inp: WhatifInput) -> tuple[Workload, dict[str, int]]:
    """The work left of every job that has a measured step cost, all submitted now (t = 0) on
    the reporting nodes; and counts for the notes: ``declared``/``estimated`` totals,
    ``fitted``/``assumed`` loss curves, ``unmeasured`` and ``finished`` jobs left out."""
    counts = dict.fromkeys(("declared", "estimated", "fitted", "assumed", "unmeasured",
                            "finished"), 0)
    profiles: dict[str, Any] = {}
    jobs: list[dict[str, Any]] = []
    cpus = {n.name: n.cpus for n in inp.nodes}
    speed = {n.name: DEFAULT_SPEED if n.speed is None else n.speed for n in inp.nodes}
    each = checkpoint_seconds(inp)
    reported = latest_reports(inp.jobs)  # an older manager sent a moving job twice
    for j in reported:
        step = j.step or 0
        if step <= 0 or not j.work_done_s or j.node not in cpus:
            counts["unmeasured"] += 1
            continue
        per_step = j.work_done_s / step * speed[j.node]  # CPU-seconds of a speed-1 core
        # the agent's and the simulator's estimate: without a total, as much again as done
        left = round(steps_left(step, j.total_steps))
        counts["declared" if j.total_steps is not None else "estimated"] += 1
        if left <= 0:
            counts["finished"] += 1
            continue
        loss, how = _loss_curve(j, step, left)
        counts[how] += 1
        top = min(cpus[j.node], j.demand_cores or cpus[j.node])
        speedup = {"1": 1.0} if top <= 1 else {"1": 1.0, f"{top:g}": float(f"{top:g}")}
        name = f"{j.namespace}/{j.pod}"
        profiles[name] = {"name": name, "iterations": left, "loss": loss,
                          "cpu_seconds_per_iteration": per_step, "speedup": speedup,
                          "checkpoint_seconds": each, "restore_seconds": each,
                          "checkpoint_bytes": 0}
        deadline = None if j.deadline is None else j.deadline - j.reported
        jobs.append({"name": name, "profile": name, "submit_s": 0.0,
                     "target_loss": j.target_loss,
                     "deadline_s": deadline if deadline is not None and deadline > 0 else None,
                     "migratable": j.checkpointable})
    used = {j.node for j in reported}
    workers = [{"name": n.name, "cpus": n.cpus, "speed": speed[n.name]} for n in inp.nodes
               if n.fresh or n.name in used]
    if not jobs:
        raise BadReply("jobs: no job with a measured step cost to simulate "
                       f"({len(reported)} reported, {counts['unmeasured']} not yet measured, "
                       f"{counts['finished']} at their total)")
    wl = Workload.model_validate({
        "format": "specon-workload/v1", "cluster": {"workers": workers},
        "profiles": profiles, "jobs": jobs,
        "description": "the live cluster's work left, from the manager (specon whatif)"})
    return wl, counts


def checkpoint_seconds(inp: WhatifInput) -> float:
    """A checkpoint's and a restore's seconds each: a move stops a job as long as the manager
    charges it (``move_cost_s``, with the simulator's restart), else CHECKPOINT_S."""
    if inp.move_cost_s is None:
        return CHECKPOINT_S
    return max(0.0, inp.move_cost_s - RESTART_S) / 2


def notes(counts: dict[str, int], inp: WhatifInput | None = None) -> list[str]:
    """The assumptions behind the numbers, one line each."""
    each = CHECKPOINT_S if inp is None else checkpoint_seconds(inp)
    told = "" if inp is None or inp.move_cost_s is None else (
        f", a move {inp.move_cost_s:g} s in all as the manager charges it")
    out = ["all jobs start now with their work left; each policy places them afresh (the "
           "simulator does not keep today's placement); each node at the speed its "
           "specon.io/cpu-speed label gives, else its agent measured, else 1 (a job's measured "
           "step cost is scaled by "
           "its node's)",
           f"speed-up linear up to the cores a job showed it can use; checkpoint and restore "
           f"{each:g} s each{told}"]
    if counts["estimated"]:
        out.append(f"{counts['estimated']} job(s) declare no total steps "
                   "(specon.io/total-steps): assumed to run as many steps again as done")
    if counts["assumed"]:
        out.append(f"{counts['assumed']} job(s) with under 5 recent losses the manager saw: "
                   f"loss assumed to fall as step^-{DECAY:g} (time to 90% is rough for them)")
    if counts["unmeasured"]:
        out.append(f"{counts['unmeasured']} job(s) without a measured step yet: left out")
    if counts["finished"]:
        out.append(f"{counts['finished']} job(s) at their declared total: left out")
    return out
