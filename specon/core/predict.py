"""Prediction from progress: when will a job reach its target loss, and when will it finish.

A learning curve is fitted to the (step, loss) points seen so far with two classic shapes,
exponential decay L = a + b·exp(-k/τ) and power law L = a + b·(k+1)^(-c); for each shape the
nonlinear parameter is searched on a log grid and (a, b) solved by least squares, so the fit is
deterministic and cannot diverge. The shape with the smaller residual wins. The uncertainty is
the residual spread: the target is reached between the steps at which the fitted curve crosses
target ± 2σ/√m (m = points in the last tenth of the run so far), a noise-aware band that
narrows as evidence accumulates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class CurveFit:
    shape: str  # "exp" or "power"
    a: float
    b: float
    p: float  # τ for "exp", c for "power"
    sigma: float  # residual standard deviation
    n: int
    last_step: float

    def loss_at(self, step: float) -> float:
        if self.shape == "exp":
            return self.a + self.b * math.exp(-step / self.p)
        return self.a + self.b * float((step + 1.0) ** (-self.p))

    def step_for(self, loss: float) -> float:
        """The step at which the fitted curve reaches ``loss`` (inf: never; 0: already)."""
        if self.b <= 0 or loss <= self.a:
            return math.inf
        ratio = (loss - self.a) / self.b
        if ratio >= 1.0:
            return 0.0
        if self.shape == "exp":
            return -self.p * math.log(ratio)
        return float(ratio ** (-1.0 / self.p)) - 1.0


def _solve(basis: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    design = np.column_stack([np.ones_like(basis), basis])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coef
    return float(coef[0]), float(coef[1]), float(resid @ resid)


def fit_curve(steps: Sequence[float], losses: Sequence[float]) -> CurveFit | None:
    """Fit the better of the two shapes; None with fewer than 5 finite points or no decay."""
    pts = [(float(k), float(v)) for k, v in zip(steps, losses, strict=True)
           if math.isfinite(k) and math.isfinite(v) and k >= 0]
    if len(pts) < 5:
        return None
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    span = max(float(x.max()), 1.0)
    best: tuple[float, str, float, float, float] | None = None
    for tau in np.geomspace(span / 100.0, span * 20.0, 48):
        a, b, sse = _solve(np.exp(-x / tau), y)
        if b > 0 and (best is None or sse < best[0]):
            best = (sse, "exp", a, b, float(tau))
    for c in np.geomspace(0.05, 4.0, 48):
        a, b, sse = _solve((x + 1.0) ** (-c), y)
        if b > 0 and (best is None or sse < best[0]):
            best = (sse, "power", a, b, float(c))
    if best is None:
        return None
    sse, shape, a, b, p = best
    sigma = math.sqrt(sse / max(1, len(pts) - 3))
    return CurveFit(shape, a, b, p, sigma, len(pts), float(x.max()))


@dataclass(frozen=True, slots=True)
class Prediction:
    """Seconds from now; inf when the fit says never. (low, high) is the uncertainty band."""

    target_s: float | None
    target_low_s: float | None
    target_high_s: float | None
    finish_s: float


def predict(
    fit: CurveFit | None,
    step_now: float,
    total_steps: float,
    steps_per_s: float,
    target: float | None,
    recent_points: int = 10,
) -> Prediction:
    """Time to the target and to completion at the current rate."""
    rate = max(steps_per_s, 1e-12)
    finish = max(0.0, total_steps - step_now) / rate
    if target is None or fit is None:
        return Prediction(None, None, None, finish)
    band = 2.0 * fit.sigma / math.sqrt(max(1, recent_points))

    def when(level: float) -> float:
        k = fit.step_for(level)
        return math.inf if math.isinf(k) else max(0.0, k - step_now) / rate

    return Prediction(when(target), when(target + band), when(target - band), finish)
