"""Slow intervals (specon.core.categorize, "Slow interval"): a job held back (a CPU floor) is
not demoted for the little progress it makes per minute; a job whose loss flattened at its
full pace still is; at most SLOW_PACE_INTERVALS slow intervals in a row are skipped."""

from __future__ import annotations

import random

from specon.core.categorize import Category, JobState, categorize
from specon.core.flowcon import FlowConParams
from specon.core.node import NodeController
from specon.defaults import SLOW_PACE, SLOW_PACE_INTERVALS

PARAMS = FlowConParams(alpha=0.05, itval_s=60.0, beta=2.0)

A = 0.05
PC, WC, CC = Category.PROGRESSING, Category.WATCHING, Category.CONVERGED


def test_a_slow_interval_keeps_the_category_and_the_last_growth() -> None:
    s = {"j": JobState(PC, last_growth=0.5, top_pace=2.0)}
    r = categorize(s, {"j": 0.02}, A, pace={"j": 0.1})  # 20x slower: growth 25x lower
    assert r.states["j"] == JobState(PC, last_growth=0.5, top_pace=2.0, slow=1)
    # without the pace (or at its usual pace) the same growth demotes it, as before
    assert categorize(s, {"j": 0.02}, A).states["j"].category is WC
    assert categorize(s, {"j": 0.02}, A, pace={"j": 2.0}).states["j"].category is WC
    # just above the threshold of pace it is judged
    at = categorize(s, {"j": 0.02}, A, pace={"j": SLOW_PACE * 2.0})
    assert at.states["j"].category is WC and at.states["j"].slow == 0


def test_a_slow_interval_can_promote() -> None:
    s = {"j": JobState(WC, last_growth=0.01, top_pace=2.0, slow=3)}
    r = categorize(s, {"j": 0.2}, A, pace={"j": 0.1})
    assert r.states["j"] == JobState(PC, last_growth=0.2, top_pace=2.0, slow=0)


def test_the_top_pace_is_the_highest_judged() -> None:
    r = categorize({"j": JobState()}, {"j": 0.5}, A, pace={"j": 1.0})
    assert r.states["j"].top_pace == 1.0
    r = categorize(r.states, {"j": 0.6}, A, pace={"j": 3.0})
    assert r.states["j"].top_pace == 3.0
    r = categorize(r.states, {"j": 0.6}, A, pace={"j": 0.7})
    assert r.states["j"].top_pace == 3.0 and r.states["j"].slow == 0


def test_at_most_n_slow_intervals_in_a_row_then_the_slow_pace_is_its_pace() -> None:
    s = {"j": JobState(PC, last_growth=0.5, top_pace=2.0)}
    for k in range(1, SLOW_PACE_INTERVALS + 1):
        s = dict(categorize(s, {"j": 0.01}, A, pace={"j": 0.1}).states)
        assert s["j"].category is PC and s["j"].slow == k
    # the next one is judged; its last growth (at the other pace) is forgotten, so a growth
    # below alpha keeps the category once, and the slow pace is the job's pace from now on
    s = dict(categorize(s, {"j": 0.01}, A, pace={"j": 0.1}).states)
    assert s["j"] == JobState(PC, last_growth=0.01, top_pace=0.1, slow=0)
    s = dict(categorize(s, {"j": 0.005}, A, pace={"j": 0.1}).states)
    assert s["j"].category is WC
    s = dict(categorize(s, {"j": 0.002}, A, pace={"j": 0.1}).states)
    assert s["j"].category is CC


def test_a_converged_job_held_back_on_a_crowded_node_is_still_asked_to_move() -> None:
    s = {"old": JobState(CC, last_growth=0.02, top_pace=2.0),
         "a": JobState(PC, last_growth=1.0), "b": JobState(PC, last_growth=1.0)}
    r = categorize(s, {"old": 0.001, "a": 1.0, "b": 1.0}, A, pace={"old": 0.1})
    assert r.reallocation_requests == ("old",)


# -- through the node controller, with loss streams like a real job's -------------------------
def curve(step: float) -> float:
    """A loss that keeps falling: a tenth of its range every 1000 steps, flattening slowly."""
    return 1.0 + 9.0 / (1.0 + step / 1000.0)


def drive(held: bool, intervals: int, noise: float,
          seed: int = 0) -> tuple[list[Category], list[float | None]]:
    """One job logging every 10 steps, 100 steps/s, for 5 intervals of 60 s, then
    ``intervals`` more at 5 steps/s (held at a twentieth of its CPU) or, ``held`` False, at
    100 steps/s with a loss that flattened. Returns its category and growth per interval."""
    rng = random.Random(seed)
    c = NodeController(PARAMS, alpha=0.01)
    c.arrive("j", 0.0, 0.0)
    step, t, cats, growth = 0.0, 0.0, [], []
    for k in range(5 + intervals):
        fast = k < 5 or not held
        rate = 100.0 if fast else 5.0
        lines = []
        for _ in range(int(rate * 60 / 10)):
            step += 10
            # flattened: it creeps down less each interval
            level = curve(step) if (k < 5 or held) else curve(30_000) - 0.05 * (1 - 0.5**k)
            lines.append(level * (1 + rng.gauss(0, noise)))
        t += 60.0
        c.add_losses("j", lines)
        c.categorize_tick(t, {"j": t * (1.0 if fast else 0.05)})
        cats.append(c.jobs["j"].cat.category)
        g = c.jobs["j"].growth
        growth.append(g.progress if g is not None else None)
    return cats, growth


def test_a_steady_job_held_at_the_floor_keeps_its_category() -> None:
    for seed in range(5):
        cats, growth = drive(held=True, intervals=SLOW_PACE_INTERVALS, noise=0.002, seed=seed)
        assert cats[4] is PC
        assert set(cats[5:]) == {PC}, cats
        # the rule is what keeps it: the same growths judged per minute alone (no pace, the
        # rule before) demote it
        states = {"j": JobState()}
        judged = []
        for g in growth:
            states = dict(categorize(states, {"j": g}, 0.01).states)
            judged.append(states["j"].category)
        assert judged[4] is PC and set(judged[5:]) != {PC}, judged


def test_a_job_whose_loss_flattened_at_full_pace_still_goes_to_watching_and_converged() -> None:
    cats, _ = drive(held=False, intervals=4, noise=0.0)
    assert cats[4] is PC
    assert WC in cats[5:] and cats[-1] is CC, cats


def test_a_moved_job_measures_its_pace_anew() -> None:
    a, b = NodeController(PARAMS, alpha=0.01), NodeController(PARAMS, alpha=0.01)
    a.arrive("j", 0.0, 0.0)
    a.jobs["j"].cat = JobState(PC, last_growth=0.5, top_pace=9.0, slow=2)
    view = a.depart("j", 10.0)
    b.arrive("j", 10.0, 0.0, view)
    assert b.jobs["j"].cat == JobState(PC, last_growth=0.5)


# -- cut intervals: the limit fell over the interval ------------------------------------------
def test_an_interval_whose_limit_was_cut_cannot_demote_even_at_a_full_looking_pace() -> None:
    # the job began the interval at the whole node; it ends it at a fortieth: its losses
    # logged before the cut make the pace look full, its growth per minute shows the cut
    s = {"j": JobState(PC, last_growth=0.5, top_pace=2.0, limit=1.0)}
    r = categorize(s, {"j": 0.02}, A, pace={"j": 1.5}, limits={"j": 0.025})
    assert r.states["j"] == JobState(PC, last_growth=0.5, top_pace=2.0, slow=1, limit=0.025)
    # the next interval begins at the new limit: held there, its slow pace keeps it, as before
    r = categorize(r.states, {"j": 0.001}, A, pace={"j": 0.05}, limits={"j": 0.025})
    assert r.states["j"].category is PC and r.states["j"].slow == 2
    # a cut can still promote (progress at a fraction of the CPU is progress)
    w = {"j": JobState(WC, last_growth=0.01, top_pace=2.0, limit=1.0)}
    up = categorize(w, {"j": 0.2}, A, pace={"j": 1.5}, limits={"j": 0.025})
    assert up.states["j"].category is PC


def test_a_limit_kept_or_cut_a_little_or_raised_is_judged_as_before() -> None:
    s = {"j": JobState(PC, last_growth=0.5, top_pace=2.0, limit=0.5)}
    for now in (0.5, SLOW_PACE * 0.5, 1.0):
        r = categorize(s, {"j": 0.02}, A, pace={"j": 2.0}, limits={"j": now})
        assert r.states["j"].category is WC and r.states["j"].limit == now
    # no limit known before (a new job) or now: no cut
    fresh = {"j": JobState(PC, last_growth=0.5, top_pace=2.0)}
    assert categorize(fresh, {"j": 0.02}, A, pace={"j": 2.0},
                      limits={"j": 0.01}).states["j"].category is WC
    assert categorize(s, {"j": 0.02}, A, pace={"j": 2.0}).states["j"].category is WC


def test_the_limit_is_remembered_through_intervals_with_no_measurement() -> None:
    s = {"j": JobState(PC, last_growth=0.5, top_pace=2.0, limit=1.0)}
    r = categorize(s, {"j": None}, A, limits={"j": 0.9})
    assert r.states["j"] == JobState(PC, last_growth=0.5, top_pace=2.0, limit=0.9)


def test_through_the_node_controller_a_job_cut_mid_interval_keeps_its_category() -> None:
    """The agent's case (tests/docker/test_agent_no_flapping.py, CI 2026-11-27). In observe
    mode (``limits_applied`` False) the cut limit was never written: the interval is judged."""
    for cut, applied in ((True, True), (False, True), (True, False)):
        c = NodeController(PARAMS, alpha=0.04)
        c.arrive("j", 0.0, 0.0)
        step, t = 0.0, 0.0
        for _ in range(4):  # alone at the whole node: 100 steps/s, a line every 10 steps
            c.add_losses("j", [curve(step := step + 10) for _ in range(600)])
            t += 60.0
            c.categorize_tick(t, {"j": t})
        assert c.jobs["j"].cat.category is PC and c.limits["j"] == 1.0
        # a competitor a second into the 5th interval; a share rule holds j at the floor.
        # Its 15 s of lines from before the cut (flushed late) make the pace a quarter of its
        # top, and its growth per minute falls under alpha (0.031 < 0.04; at full pace: 0.046)
        c.arrive("k", t + 1.0, 0.0)
        if cut:
            c.shares = {"j": 0.025, "k": 0.975}
        c.add_losses("j", [curve(step := step + 10) for _ in range(150)])
        c.categorize_tick(t + 60.0, {"j": t + 16.0, "k": 59.0}, limits_applied=applied)
        got = c.jobs["j"].cat
        assert got.limit == (c.limits["j"] if applied else None)
        if cut and applied:
            assert got.category is PC and got.slow == 1, got
        else:  # the same interval with no cut is judged (the rule before for both)
            assert got.category is WC, got
