"""A job's move cost (specon.core.move_cost): its own measured running mean when the annotation
holds a sane number, the configured default otherwise; the annotation is tenant-writable, so
any other text is no measurement and never an error."""

from __future__ import annotations

import pytest

from specon.core.move_cost import (
    MAX_COST_S,
    MIN_COST_S,
    format_cost,
    job_cost,
    parse_cost,
    realised_gain,
    updated_cost,
)


@pytest.mark.parametrize("text", [
    None, "", "nan", "NaN", "inf", "-inf", "-1", "0", "0.5", "1e400", "86400.1", "abc",
    "1" * 10_000, " " * 40 + "30", "30 s", "0x10", 30.0, ["30"], {"a": 1}, True,
])
def test_anything_but_a_sane_number_is_no_measurement(text: object) -> None:
    assert parse_cost(text) is None
    assert job_cost(text, 120.0) == 120.0


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 30.0), ("30.5", 30.5), (" 45 ", 45.0), ("1", MIN_COST_S), ("86400", MAX_COST_S),
    ("1e3", 1000.0),
])
def test_a_sane_number_is_the_jobs_cost(text: str, seconds: float) -> None:
    assert parse_cost(text) == seconds
    assert job_cost(text, 120.0) == seconds


def test_the_running_mean_moves_halfway_and_ignores_a_bad_previous_value() -> None:
    assert updated_cost(None, 40.0) == 40.0
    assert updated_cost("nan", 40.0) == 40.0
    assert updated_cost("100", 40.0) == 70.0
    # clamped to what parse_cost reads back
    assert updated_cost(None, 0.0) == MIN_COST_S
    assert updated_cost(None, 1e9) == MAX_COST_S
    assert updated_cost(None, float("nan")) == MAX_COST_S
    for seconds in (0.2, 33.333, 1e9):
        assert parse_cost(format_cost(updated_cost(None, seconds))) is not None


def test_the_realised_gain_is_the_prediction_with_the_measured_cost() -> None:
    assert realised_gain(100.0, 120.0, 40.0) == 180.0  # cheaper than charged: it gained more
    assert realised_gain(100.0, 120.0, 300.0) == -80.0  # dearer: the move lost
    assert realised_gain(100.0, 120.0, 120.0) == 100.0
