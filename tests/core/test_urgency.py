"""The QoS urgency rule and its expression as node limits."""

import math

from hypothesis import given
from hypothesis import strategies as st

from specon.core.urgency import GIVEN_UP, ON_TRACK, limits_from_levels, urgency


def test_levels():
    assert urgency(None, 1.0, 2.0, 10.0) == ON_TRACK
    assert urgency(math.inf, 1.0, 2.0, 10.0) == GIVEN_UP
    assert urgency(5.0, 1.0, 2.0, 10.0) == ON_TRACK  # 5 s needed, 10 s left
    assert urgency(15.0, 1.0, 2.0, 10.0) == 2  # 15 s now, 7.5 s at full speed: 2.5 s slack
    assert urgency(30.0, 1.0, 2.0, 10.0) == GIVEN_UP  # 15 s even at full speed


def test_less_slack_ranks_first():
    assert urgency(15.0, 1.0, 2.0, 10.0) < urgency(12.0, 1.0, 2.0, 10.0)


def test_limits_hold_given_up_jobs_only_when_someone_is_at_risk():
    assert limits_from_levels({"a": ON_TRACK, "b": GIVEN_UP}, 0.1) == {"a": 1.0, "b": 1.0}
    assert limits_from_levels({"a": 3, "b": GIVEN_UP, "c": ON_TRACK}, 0.1) == {
        "a": 1.0, "b": 0.1, "c": 1.0}


@given(st.floats(0, 1e6), st.floats(1e-6, 1e3), st.floats(1e-6, 1e3), st.floats(0, 1e6))
def test_urgency_is_a_valid_level(steps, now, best, left):
    level = urgency(steps, now, best, left)
    assert 0 <= level <= GIVEN_UP
