"""Learning-curve prediction: fits known curves, bounded uncertainty, never raises."""

import math
import random
import time

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


# --- Recovery of known shapes from noisy points, the band, junk input, speed. ---

def _noisy(curve, steps, rel, seed):
    rng = random.Random(seed)
    return [curve(k) * math.exp(rng.gauss(0, rel)) for k in steps]


CURVES = {
    # name: (curve, the step the target is reached at, steps seen)
    "exp": (lambda k: 0.2 + 2.0 * math.exp(-k / 300), 1200.0, 800),
    "power": (lambda k: 0.05 + 3.0 * (k + 1) ** -0.6, 2500.0, 800),
    "power-to-zero": (lambda k: 4.0 * (k + 1) ** -0.8, 3000.0, 1000),
    "log-linear": (lambda k: 3.0 - 0.3 * math.log1p(k), 2500.0, 800),
}


@pytest.mark.parametrize("name", sorted(CURVES))
def test_recovers_known_curves_with_noise(name):
    curve, reach, seen = CURVES[name]
    target = curve(reach)
    errors = []
    for seed in range(5):
        steps = list(range(0, seen, 2))
        fit = fit_curve(steps, _noisy(curve, steps, 0.05, seed))
        assert fit is not None
        errors.append(abs(fit.step_for(target) - reach) / reach)
    # Extrapolating 1.5-3x beyond the steps seen, through 5% noise.
    assert sorted(errors)[2] < 0.15, errors
    assert max(errors) < 0.4, errors


def test_band_contains_the_truth_on_noisy_curves():
    inside = total = 0
    for name, (curve, reach, seen) in sorted(CURVES.items()):
        for seed in range(6):
            steps = list(range(0, seen, 2))
            fit = fit_curve(steps, _noisy(curve, steps, 0.1, 100 + seed))
            assert fit is not None, name
            p = predict(fit, step_now=seen, total_steps=10 * reach, steps_per_s=1.0,
                        target=curve(reach))
            assert p.target_step_low <= p.target_step <= p.target_step_high
            assert p.target_low_s <= p.target_s <= p.target_high_s
            total += 1
            inside += p.target_step_low <= reach <= p.target_step_high
    # A ±2σ band; 20 of 24 on this set (the misses: an exponential with its asymptote still
    # far below the points seen, fitted as one without, predicts the target ~25% early).
    assert inside >= 0.75 * total, f"{inside}/{total}"


def test_keeps_decaying_curves_are_not_never_and_flat_ones_are():
    # Loss decaying as a power law towards zero, seen only while it looks slow: reachable.
    steps = list(range(1, 400, 2))
    fit = fit_curve(steps, _noisy(lambda k: 2.0 * (k + 1) ** -0.3, steps, 0.05, 1))
    assert fit is not None and math.isfinite(fit.step_for(0.3))
    # A curve that has levelled off at 1.0 (plus noise) never reaches 0.5.
    steps = list(range(0, 2000, 4))
    fit = fit_curve(steps, _noisy(lambda k: 1.0 + math.exp(-k / 100), steps, 0.02, 2))
    assert fit is not None and math.isinf(fit.step_for(0.5))
    assert fit.step_for(1.5) < 100


def test_spikes_do_not_move_the_fit():
    steps = list(range(0, 600, 2))
    clean = [0.3 + 2.0 * math.exp(-k / 200) for k in steps]
    spiky = [v * (8.0 if i % 17 == 5 else 1.0) for i, v in enumerate(clean)]
    fit = fit_curve(steps, spiky)
    assert fit is not None
    assert fit.step_for(0.4) == pytest.approx(-200 * math.log(0.1 / 2.0), rel=0.1)


@pytest.mark.parametrize("values", [
    [],
    [1.0] * 4,
    [1.0] * 50,  # flat
    [float(k) for k in range(50)],  # increasing
    [math.nan] * 50,
    [math.inf, -math.inf, math.nan, 1.0, 2.0, 3.0],
    [-float(k) for k in range(50)],  # decreasing through zero
    [1e300 * (1 - k / 60) for k in range(50)],
    [0.0] * 20 + [1.0] * 20,
    [1e-300 * (50 - k) for k in range(50)],
])
def test_junk_never_raises(values):
    fit = fit_curve(list(range(len(values))), values)
    if fit is not None:
        assert math.isfinite(fit.sigma)
        fit.step_for(0.5)
        fit.step_band(0.5)
        fit.loss_at(10)
    p = predict(fit, 5, 100, 1.0, 0.5)
    assert p.finish_s == pytest.approx(95)


def test_junk_steps_and_lengths():
    assert fit_curve([1, 2, 3, 4, 5], [1, 2, 3]) is None
    assert fit_curve([math.nan] * 10, list(range(10))) is None
    assert fit_curve([-1.0] * 10, list(range(10))) is None
    assert fit_curve([3.0] * 10, [2.0, 1.9, 1.8, 1.7, 1.6, 1.5, 1.4, 1.3, 1.2, 1.1]) is None \
        or True  # one step repeated: any answer, no exception


def test_deterministic_and_fast():
    rng = random.Random(0)
    steps = list(range(0, 5000, 10))
    losses = [0.1 + 2.0 * math.exp(-k / 900) + rng.gauss(0, 0.02) for k in steps]
    assert fit_curve(steps, losses) == fit_curve(steps, losses)
    fit_curve(steps, losses)
    best = math.inf
    for _ in range(5):
        t = time.perf_counter()
        fit_curve(steps, losses)
        best = min(best, time.perf_counter() - t)
    assert best < 0.02  # about 2 ms on a quiet machine; generous for a loaded one
