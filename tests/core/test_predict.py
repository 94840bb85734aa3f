"""Learning-curve prediction: fits known curves, bounded uncertainty, never raises."""

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specon.core.predict import fit_curve, predict


def test_fits_an_exponential_and_predicts_the_target_step():
    steps = list(range(0, 400, 4))
    losses = [0.2 + 2.0 * math.exp(-k / 120) for k in steps]
    fit = fit_curve(steps, losses)
    assert fit is not None and fit.a == pytest.approx(0.2, abs=0.02)
    true = -120 * math.log((0.5 - 0.2) / 2.0)
    assert fit.step_for(0.5) == pytest.approx(true, rel=0.05)
    p = predict(fit, step_now=200, total_steps=1000, steps_per_s=2.0, target=0.5)
    assert p.finish_s == pytest.approx(400)
    assert p.target_s == pytest.approx((true - 200) / 2.0, rel=0.1)
    assert p.target_low_s <= p.target_s <= p.target_high_s


def test_fits_a_noisy_power_law_from_early_points():
    rng = random.Random(3)
    steps = list(range(1, 300, 3))
    losses = [0.1 + 3.0 * (k + 1) ** -0.7 + rng.gauss(0, 0.01) for k in steps]
    fit = fit_curve(steps, losses)
    assert fit is not None
    assert fit.loss_at(1000) == pytest.approx(0.1 + 3.0 * 1001 ** -0.7, abs=0.05)


def test_unreachable_target_is_infinite_and_too_few_points_is_none():
    steps = list(range(50))
    fit = fit_curve(steps, [1.0 + math.exp(-k / 10) for k in steps])
    assert fit is not None and math.isinf(fit.step_for(0.5))
    assert fit_curve([1, 2, 3], [3.0, 2.0, 1.0]) is None
    assert predict(None, 0, 10, 1.0, 0.5).target_s is None


@given(st.lists(st.one_of(st.floats(-1e6, 1e6), st.just(math.nan), st.just(math.inf)),
                max_size=60))
def test_fit_never_raises(values):
    fit = fit_curve(list(range(len(values))), values)
    if fit is not None:
        assert math.isfinite(fit.sigma)
