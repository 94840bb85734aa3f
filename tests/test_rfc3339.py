"""specon.rfc3339: the forms the Kubernetes API writes, and back."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specon import rfc3339

# 2000-01-01 .. 2200-01-01: the times a cluster sees, in Unix seconds.
TIMES = st.floats(min_value=946_684_800, max_value=7_258_118_400, allow_nan=False)
NANOS = st.integers(min_value=0, max_value=7_258_118_400 * 10**9)


def test_whole_seconds():
    assert rfc3339.seconds(0) == "1970-01-01T00:00:00Z"
    assert rfc3339.seconds(1_764_185_533) == "2025-11-26T19:32:13Z"


def test_seconds_cut_the_fraction_never_round_it_up():
    assert rfc3339.seconds(1_764_185_533.999_999_8) == "2025-11-26T19:32:13Z"
    assert rfc3339.seconds(-0.5) == "1969-12-31T23:59:59Z"


def test_microseconds_round_a_float_to_the_microsecond():
    assert rfc3339.micro(1_764_185_533.25) == "2025-11-26T19:32:13.250000Z"
    assert rfc3339.micro(0.000_000_6) == "1970-01-01T00:00:00.000001Z"
    assert rfc3339.micro(1.999_999_9) == "1970-01-01T00:00:02.000000Z"


def test_microseconds_from_nanoseconds_cut_exactly():
    assert rfc3339.micro_ns(1_764_185_533_250_000_999) == "2025-11-26T19:32:13.250000Z"
    assert rfc3339.micro_ns(1_764_185_533_999_999_999) == "2025-11-26T19:32:13.999999Z"
    assert rfc3339.micro_ns(0) == "1970-01-01T00:00:00.000000Z"


@given(NANOS)
def test_micro_ns_is_the_time_cut_to_the_microsecond(ns):
    want = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ns // 1000)
    assert rfc3339.micro_ns(ns) == want.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert rfc3339.parse(rfc3339.micro_ns(ns)) == (ns // 1000) / 10**6


@given(TIMES)
def test_round_trips(t):
    assert rfc3339.parse(rfc3339.seconds(t)) == math.floor(t)
    assert abs(rfc3339.parse(rfc3339.micro(t)) - t) <= 0.5e-6 + math.ulp(t)


def test_parse_reads_offsets_and_the_apis_forms():
    assert rfc3339.parse("2025-11-26T19:32:13Z") == 1_764_185_533
    assert rfc3339.parse("2025-11-26T20:32:13+01:00") == 1_764_185_533
    assert rfc3339.parse("2025-11-26T19:32:13.250000Z") == 1_764_185_533.25


@pytest.mark.parametrize("text", ["", "yesterday", "2025-13-01T00:00:00Z"])
def test_parse_refuses_what_is_not_a_time(text):
    with pytest.raises(ValueError):
        rfc3339.parse(text)
