"""Quality annotations: valid forms parse, malformed ones name the annotation."""

import contextlib
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specon.qos_annotations import (
    DEADLINE,
    STOP_AT_TARGET,
    TARGET_LOSS,
    TOTAL_STEPS,
    QosError,
    parse,
    parse_duration,
)

T0 = datetime(2026, 11, 21, 16, 0, tzinfo=UTC)


def test_durations():
    assert parse_duration("90m") == 5400
    assert parse_duration("2h30m") == 9000
    assert parse_duration("1d") == 86400
    assert parse_duration("1.5s") == 1.5
    for bad in ("", "h", "10", "5 m", "1x", "m5"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_full_spec_with_rfc3339_and_duration():
    q = parse({TARGET_LOSS: "0.05", DEADLINE: "2026-11-21T18:00:00Z", STOP_AT_TARGET: "true"}, T0)
    assert q.target_loss == 0.05 and q.deadline_s == 7200 and q.stop_at_target
    assert parse({DEADLINE: "2h"}, T0).deadline_s == 7200
    assert parse({DEADLINE: "2026-11-21T18:00:00+01:00"}, T0).deadline_s == 3600
    assert parse({}, T0).target_loss is None and parse({}, T0).empty
    assert parse({DEADLINE: "1h", TOTAL_STEPS: " 1200 "}, T0).total_steps == 1200


@pytest.mark.parametrize(
    ("ann", "needle"),
    [
        ({TARGET_LOSS: "low"}, "specon.io/target-loss: 'low' is not a number"),
        ({TARGET_LOSS: "nan"}, "finite"),
        ({DEADLINE: "tomorrow"}, "neither an RFC 3339 time"),
        ({DEADLINE: "2026-11-21T18:00:00"}, "no time zone"),
        ({DEADLINE: "2026-11-21T15:00:00Z"}, "not after the pod's creation"),
        ({DEADLINE: "400d"}, "at most 366 days"),
        ({STOP_AT_TARGET: "yes", TARGET_LOSS: "1"}, "true or false"),
        ({STOP_AT_TARGET: "true"}, "no specon.io/target-loss"),
        ({TOTAL_STEPS: "1e3"}, "specon.io/total-steps: '1e3' is not a whole number"),
        ({TOTAL_STEPS: "0"}, "between 1 and"),
    ],
)
def test_malformed_annotations_name_themselves(ann, needle):
    with pytest.raises(QosError) as info:
        parse(ann, T0)
    assert needle in str(info.value)


@given(st.dictionaries(st.sampled_from([TARGET_LOSS, DEADLINE, STOP_AT_TARGET]), st.text()))
def test_parse_never_raises_anything_but_qos_error(ann):
    with contextlib.suppress(QosError):
        parse(ann, T0)
