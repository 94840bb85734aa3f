"""The QoS urgency rule and its expression as node limits."""

import math

from hypothesis import given
from hypothesis import strategies as st

from specon.core.urgency import (
    GIVEN_UP,
    ON_TRACK,
    assess,
    prioritised,
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
    # past its deadline: given up, and no number of cores is said to be enough (it was 5e10)
    late = assess(50.0, 1.0, 0.5, 2.0, -3.0)
    assert late.state == "given-up" and late.need_cores is None and late.slack_s == -53.0
    assert assess(50.0, 1.0, 0.5, 2.0, 0.0).need_cores is None


def test_limits_by_strict_priority_when_someone_is_at_risk():
    calm = assess(10.0, 1.0, 1.0, 1.0, 100.0)  # on track with a wide margin
    late = assess(150.0, 1.0, 0.5, 1.0, 100.0)  # late at 0.5 cores, in time at 1 (1 thread)
    gone = assess(500.0, 1.0, 0.5, 1.0, 100.0)  # late even at 1 core
    assert (calm.state, late.state, gone.state) == ("on-track", "at-risk", "given-up")
    # nobody at risk: no say over anyone, not even a job past saving: it yields only to a
    # job that needs the CPU (held at the floor with nobody to yield to, a missed deadline
    # cost 4x plain sharing on the real engine, 521 s against 87 s; docs/qos.md)
    assert qos_limits({"a": calm, "b": None}, 2.0, 0.05) == {"a": None, "b": None}
    assert qos_limits({"a": calm, "g": gone}, 2.0, 0.05) == {"a": None, "g": None}
    # at risk: it may use the node; it can use one core of two, the on-track job and the plain
    # one share the other (the plain one keeps FlowCon's limit), the job past saving yields
    lim = qos_limits({"a": calm, "b": None, "p": late, "g": gone}, 2.0, 0.05)
    assert lim == {"a": 0.25, "b": None, "p": 1.0, "g": 0.05}
    assert qos_limits({"p": late}, 2.0, 0.05) == {"p": None}  # alone: nothing to decide
    # late at its current rate but not put first (fine at an equal share): it shares with the
    # jobs on track, it is not held at the floor (found on the real engine)
    held = assess(25.0, 0.05, 0.05, 1.0, 100.0)
    assert held.state == "at-risk"
    assert qos_limits({"h": held, "a": calm}, 2.0, 0.05, frozenset()) == {"h": None, "a": None}
    lim = qos_limits({"h": held, "a": calm, "p": late, "x": None}, 2.0, 0.05, frozenset({"p"}))
    assert lim["p"] == 1.0 and lim["h"] == lim["a"] == 1 / 6


def test_least_laxity_first_among_jobs_at_risk():
    tight = assess(180.0, 1.0, 0.5, 1.0, 100.0)  # 90 s at full speed, 100 s left: 10 s laxity
    loose = assess(150.0, 1.0, 0.5, 1.0, 100.0)  # 25 s laxity
    assert tight.laxity < loose.laxity
    # a 1-core node: the tightest gets it (may use all); the other holds the floor
    lim = qos_limits({"t": tight, "l": loose}, 1.0, 0.05)
    assert lim == {"t": 1.0, "l": 0.05}


def test_reached_target_yields_to_a_job_put_first_only():
    done = assess(0.0, 1.0, 1.0, 2.0, 100.0, reached=True)
    late = assess(150.0, 1.0, 0.5, 1.0, 100.0)
    assert qos_limits({"d": done, "b": None}, 2.0, 0.05) == {"d": None, "b": None}
    assert qos_limits({"d": done, "b": None, "p": late}, 2.0, 0.05) == {
        "d": 0.05, "b": None, "p": 1.0}


def test_prioritised_while_it_needs_most_of_an_equal_share():
    late = assess(150.0, 1.0, 0.5, 1.0, 100.0)  # needs 150 / 75 s / 2 steps/s/core = 1 core
    assert prioritised({"p": late, "x": None}, 2.0) == {"p"}
    # late at its current rate only because it is held low: at an equal share (0.5 core of
    # four jobs on 2) it would need 25 / 75 s / 1 = 0.33 core < 0.75 * 0.5: not put first
    held = assess(25.0, 0.05, 0.05, 1.0, 100.0)
    assert held.state == "at-risk"
    four = {"p": held, "x": None, "y": None, "z": None}
    assert prioritised(four, 2.0) == frozenset()
    # given the CPU it is on track at its new rate, but still needs 80 / 75 s / 1 = 1.07
    # cores, more than an equal share: it keeps its place
    caught = assess(80.0, 1.0, 1.0, 1.0, 100.0)
    assert caught.state == "on-track"
    four["p"] = caught
    assert prioritised(four, 2.0) == frozenset()
    assert prioritised(four, 2.0, frozenset({"p"})) == {"p"}
    # far enough ahead (0.3 core): released
    four["p"] = assess(22.5, 1.0, 1.0, 1.0, 100.0)
    assert prioritised(four, 2.0, frozenset({"p"})) == frozenset()
    four["p"] = caught
    assert qos_limits(four, 2.0, 0.05, frozenset({"p"}))["p"] == 1.0


@given(st.floats(0, 1e6), st.floats(1e-6, 1e3), st.floats(1e-6, 1e3), st.floats(0, 1e6))
def test_urgency_is_a_valid_level(steps, now, best, left):
    level = urgency(steps, now, best, left)
    assert 0 <= level <= GIVEN_UP
