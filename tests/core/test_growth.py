"""Growth, growth efficiency and the scale-free normalisation."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specon.core.growth import LossTrack, interval_value


def test_interval_value_is_median_and_falls_back_to_previous():
    assert interval_value([3.0, 1.0, 2.0], None) == 2.0
    assert interval_value([1.0, 2.0], None) == 1.5
    assert interval_value([], 7.0) == 7.0
    assert interval_value([math.nan, math.inf], 7.0) == 7.0
    assert interval_value([], None) is None


def test_interval_without_new_log_lines_gives_no_growth():
    tr, _ = LossTrack().observe([10.0], 30.0, 30.0)
    tr, g = tr.observe([9.0], 30.0, 30.0)
    assert g is not None
    assert tr.observe([], 30.0, 30.0) == (tr, None)


def test_first_interval_has_no_growth_second_has():
    t0, g0 = LossTrack().observe([10.0], 30.0, 30.0)
    assert g0 is None and t0.first == 10.0
    _t1, g1 = t0.observe([8.0], 30.0, 60.0)
    assert g1 is not None
    # |dE| = 2 over a range of 2 in 30 s -> 2 ranges per minute; 2 cores used -> 1 per core
    assert g1.progress == pytest.approx(2.0)
    assert g1.cores == pytest.approx(2.0)
    assert g1.efficiency == pytest.approx(1.0)


def test_scale_free_same_growth_for_scaled_losses():
    curve = [5.0, 3.0, 2.2, 2.0, 1.95]
    def run(scale: float, offset: float) -> list[float]:
        tr, out = LossTrack(), []
        for v in curve:
            tr, g = tr.observe([v * scale + offset], 30.0, 30.0)
            if g is not None:
                out.append(g.progress)
        return out
    base = run(1.0, 0.0)
    assert run(1000.0, 0.0) == pytest.approx(base)
    assert run(0.001, 42.0) == pytest.approx(base)


def test_flat_start_does_not_divide_by_zero():
    tr, _ = LossTrack().observe([0.0], 30.0, 30.0)
    tr, g = tr.observe([0.0], 30.0, 30.0)
    assert g is not None and g.progress == 0.0


@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=30),
    st.floats(0.1, 600), st.floats(0, 1e4),
)
def test_growth_is_finite_and_non_negative(values, dt, cpu):
    tr = LossTrack()
    for v in values:
        tr, g = tr.observe([v], dt, cpu)
        if g is not None:
            assert math.isfinite(g.progress) and g.progress >= 0
            assert math.isfinite(g.efficiency) and g.efficiency >= 0


def test_intervals_without_a_finite_loss_are_counted_until_a_finite_one():
    tr, _ = LossTrack().observe([10.0], 30.0, 30.0)
    tr, _ = tr.observe([9.0], 30.0, 30.0)
    for k in (1, 2):
        tr, g = tr.observe([math.nan, math.inf], 30.0, 30.0)
        assert g is None and tr.invalid == k and tr.last == 9.0
    assert tr.observe([], 30.0, 30.0) == (tr, None)  # nothing logged: neither counts nor resets
    tr, g = tr.observe([-math.inf], 30.0, 30.0)
    assert tr.invalid == 3
    tr, g = tr.observe([math.nan, 8.0], 30.0, 30.0)
    assert g is not None and tr.invalid == 0
    first, _ = LossTrack().observe([math.nan], 30.0, 30.0)
    assert first.first is None and first.invalid == 1
