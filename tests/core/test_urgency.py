"""The QoS urgency rule and its expression as node limits."""

import math

from hypothesis import given
from hypothesis import strategies as st

from specon.core.urgency import (
    GIVEN_UP,
    ON_TRACK,
    assess,
    pressed_jobs,
    qos_limits,
    urgency,
)


def test_levels():
    assert urgency(None, 1.0, 2.0, 10.0) == ON_TRACK
    assert urgency(math.inf, 1.0, 2.0, 10.0) == GIVEN_UP
    assert urgency(5.0, 1.0, 2.0, 10.0) == ON_TRACK  # 5 s needed, 10 s left
    assert urgency(15.0, 1.0, 2.0, 10.0) == 2  # 15 s now, 7.5 s at full speed: 2.5 s slack
    assert urgency(30.0, 1.0, 2.0, 10.0) == GIVEN_UP  # 15 s even at full speed


def test_less_slack_ranks_first():
    assert urgency(15.0, 1.0, 2.0, 10.0) < urgency(12.0, 1.0, 2.0, 10.0)


def test_assess_states():
    assert assess(None, 1.0, 1.0, 2.0, 100.0).state == "on-track"  # nothing to predict yet
    assert assess(10.0, 0.0, 1.0, 2.0, 100.0).state == "on-track"  # no rate yet
    assert assess(math.inf, 1.0, 1.0, 2.0, 100.0).state == "given-up"
    assert assess(0.0, 1.0, 1.0, 2.0, 100.0, reached=True).state == "reached"
    a = assess(50.0, 1.0, 0.5, 2.0, 100.0)  # 50 s at this rate, 100 s left
    assert a.state == "on-track" and a.slack_s == 50.0 and a.predicted_s == 50.0
    # 2 steps/s per core: 50 steps in 75 s need a third of a core
    assert a.need_cores is not None and math.isclose(a.need_cores, 50 / 75 / 2)
    b = assess(150.0, 1.0, 0.5, 2.0, 100.0)  # late at 0.5 cores, in time at 2
    assert b.state == "at-risk" and b.slack_s == -50.0
    assert assess(500.0, 1.0, 0.5, 2.0, 100.0).state == "given-up"  # late even at 2 cores
    assert assess(50.0, 1.0, 1.0, 2.0, math.inf).slack_s is None  # a target, no deadline


def test_limits_only_when_someone_is_pressed():
    calm = assess(10.0, 1.0, 1.0, 2.0, 100.0)  # needs 0.13 cores of a 1-core fair share
    pressed = assess(150.0, 1.0, 0.5, 2.0, 100.0)  # needs 1 core; fair share 2/3
    done = assess(0.0, 1.0, 1.0, 2.0, 100.0, reached=True)
    assert qos_limits({"a": calm, "b": None}, 2.0, 0.05) == {"a": None, "b": None}
    lim = qos_limits({"a": calm, "b": None, "p": pressed}, 2.0, 0.05)
    assert lim["p"] == 1.0 and lim["b"] is None
    assert calm.need_cores is not None and lim["a"] == max(0.05, calm.need_cores / 2)
    # a reached target gives its CPU up even when nobody is pressed
    assert qos_limits({"d": done, "b": None}, 2.0, 0.05) == {"d": 0.05, "b": None}
    assert qos_limits({"d": done}, 2.0, 0.05) == {"d": None}  # alone: no one to give to


def test_pressed_until_well_ahead():
    # need 1 core, equal share 2/3: pressed
    late = assess(150.0, 1.0, 0.5, 2.0, 100.0)
    assert pressed_jobs({"p": late, "x": None, "y": None}, 2.0) == {"p"}
    # it caught up: needs 0.5 core, below the share but above half of it: still pressed
    caught = assess(75.0, 2.0, 1.0, 2.0, 100.0)
    assert pressed_jobs({"p": caught, "x": None, "y": None}, 2.0) == frozenset()
    assert pressed_jobs({"p": caught, "x": None, "y": None}, 2.0, frozenset({"p"})) == {"p"}
    ahead = assess(30.0, 2.0, 1.0, 2.0, 100.0)  # needs 0.2 core: released
    assert pressed_jobs({"p": ahead, "x": None, "y": None}, 2.0, frozenset({"p"})) == frozenset()
    lim = qos_limits({"p": caught, "x": None}, 2.0, 0.05, pressed=frozenset({"p"}))
    assert lim == {"p": 1.0, "x": None}


def test_pressed_stays_pressed_when_it_gets_the_cpu():
    # the same job measured at 0.5 and at 1 core: its need and so the decision do not change
    slow = assess(150.0, 1.0, 0.5, 2.0, 100.0)
    fast = assess(148.0, 2.0, 1.0, 2.0, 99.0)
    for a in (slow, fast):
        assert qos_limits({"p": a, "x": None, "y": None}, 2.0, 0.05)["p"] == 1.0


@given(st.floats(0, 1e6), st.floats(1e-6, 1e3), st.floats(1e-6, 1e3), st.floats(0, 1e6))
def test_urgency_is_a_valid_level(steps, now, best, left):
    level = urgency(steps, now, best, left)
    assert 0 <= level <= GIVEN_UP
