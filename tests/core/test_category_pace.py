"""Algorithm 3 judges progress per step, not per minute (issue 26): a steady job whose CPU is
cut to a floor keeps its category, a converging one still reaches CC (specon.core.growth.Pace,
run through the node controller as the agent and the simulator run it)."""

from __future__ import annotations

import math

import pytest

from specon.core.categorize import Category, JobState, categorize
from specon.core.flowcon import FlowConParams
from specon.core.growth import LossTrack, Pace
from specon.core.node import NodeController
from specon.defaults import ALPHA

INTERVAL_S = 60.0
PARAMS = FlowConParams(alpha=0.01, itval_s=INTERVAL_S, beta=1.0)
#: Records a job logs per interval with the CPU it wants (1 core), and at the floor.
FULL_RECORDS = 20
FLOOR_CORES = 0.05


def steady(k: int) -> float:
    """Loss at record ``k`` of a job still well inside its fall, with a little minibatch noise."""
    return math.exp(-k / 2000.0) + 0.0005 * math.sin(1.7 * k)


def converging(k: int) -> float:
    return math.exp(-k / 60.0) + 0.0005 * math.sin(1.7 * k)


class Job:
    """One job on one controller: logs records at a pace set by its cores."""

    def __init__(self, curve, alpha: float = ALPHA) -> None:
        self.c = NodeController(PARAMS, alpha=alpha)
        self.curve = curve
        self.k = 0  # records logged
        self.debt = 0.0
        self.cpu = 0.0  # cumulative CPU-seconds
        self.now = 0.0
        self.c.arrive("j", 0.0, 0.0)

    def interval(self, cores: float) -> Category:
        self.debt += FULL_RECORDS * cores
        n = int(self.debt + 1e-9)
        self.debt -= n
        self.c.add_losses("j", [self.curve(self.k + i) for i in range(n)])
        self.k += n
        self.now += INTERVAL_S
        self.cpu += cores * INTERVAL_S
        self.c.categorize_tick(self.now, {"j": self.cpu})
        return self.c.jobs["j"].cat.category


def test_steady_job_cut_to_the_floor_for_ten_intervals_keeps_its_category() -> None:
    job = Job(steady)
    for _ in range(10):
        assert job.interval(1.0) is Category.PROGRESSING
    held = [job.interval(FLOOR_CORES) for _ in range(10)]
    assert held == [Category.PROGRESSING] * 10
    back = [job.interval(1.0) for _ in range(5)]
    assert back == [Category.PROGRESSING] * 5


def per_minute(curve, cores: list[float]) -> list[Category]:
    """Categories by the per-minute rule (before issue 26) on the stream Job logs."""
    track, state, out, k, debt = LossTrack(), JobState(), [], 0, 0.0
    for c in cores:
        debt += FULL_RECORDS * c
        n = int(debt + 1e-9)
        debt -= n
        track, g = track.observe([curve(k + i) for i in range(n)], INTERVAL_S, c * INTERVAL_S)
        k += n
        state = categorize({"j": state}, {"j": g.progress if g else None}, ALPHA).states["j"]
        out.append(state.category)
    return out


def test_the_per_minute_rule_would_have_demoted_it() -> None:
    """The scenario above is the flapping one: judged per minute, the job held at the floor
    leaves PC, and is PC again once its CPU is back (what issue 26 saw on a real node)."""
    cats = per_minute(steady, [1.0] * 10 + [FLOOR_CORES] * 10 + [1.0] * 5)
    assert cats[:10] == [Category.PROGRESSING] * 10
    assert Category.CONVERGED in cats[10:20]
    assert cats[-1] is Category.PROGRESSING


def test_converging_job_still_reaches_cc_and_as_soon_as_before() -> None:
    job = Job(converging)
    cats = [job.interval(1.0) for _ in range(40)]
    assert cats[-1] is Category.CONVERGED
    # the per-minute rule on the same stream, unthrottled, converges at the same interval
    old = per_minute(converging, [1.0] * 40)
    assert cats.index(Category.CONVERGED) == old.index(Category.CONVERGED)


def test_converging_job_held_at_the_floor_still_converges() -> None:
    """Per step, not per minute: a job that converges at the floor is judged on its steps."""
    job = Job(converging)
    for _ in range(3):
        job.interval(1.0)
    cats = [job.interval(FLOOR_CORES) for _ in range(400)]
    assert cats[-1] is Category.CONVERGED


def test_pace_gives_the_unthrottled_progress_per_step() -> None:
    """Half the records in the same span, the loss half as far: the same judged growth."""
    track, _ = LossTrack().observe([10.0], 60.0, 60.0)
    track, g_full = track.observe([9.0], 60.0, 60.0)
    assert g_full is not None
    pace, full = Pace().judge(g_full, 20, 60.0)
    _, g_half = track.observe([8.5], 60.0, 30.0)
    assert g_half is not None
    _, half = pace.judge(g_half, 10, 60.0)
    # per minute it made 0.5 of a range of 1.5; per step at its top pace, twice that
    assert full.progress == pytest.approx(1.0)
    assert half.progress == pytest.approx(0.5 / 1.5 * 2)
    assert not pace.ready(5, 60.0) and pace.ready(10, 60.0) and Pace().ready(1, 60.0)
    assert not Pace().ready(0, 60.0)
