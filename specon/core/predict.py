"""Prediction from progress: when will a job reach its target loss, and when will it finish.

The logged loss is noisy (mini-batch noise, spikes) and its noise scales with its level, so the
curve is fitted to a de-noised series, not to the raw points:

1. **De-noise.** The points are binned (edges equally spaced in log step, merged with edges
   equally spaced in step so that the recent half keeps bins) and each bin is summarised by
   its median, which ignores spikes. A bin's weight is its point count (the median of more
   points is less noisy) times a recency factor (the recent part of the curve says most
   about its future). When all levels are positive the noise is taken as relative: the
   weights are divided by the level squared, and held-out errors and noise are log ratios.
   Bins before the highest one in the first half (a warm-up) are left out.
2. **Candidate shapes**, each fitted by weighted least squares for (a, b) with its nonlinear
   parameter searched on a log grid and refined by one parabolic step (deterministic, cannot
   diverge): exponential decay ``a + b·exp(-k/τ)`` and power law ``a + b·(k+1)^-c``, which
   flatten at an asymptote a (not below zero for positive losses), and three that keep
   decaying: the same two with a = 0 (only for positive losses) and ``a − b·log(k+1)``.
3. **Held-out choice.** Each shape is fitted on the first half of the steps seen and scored on
   how well it forecasts the second half (mean squared error); among the shapes within
   ``_COMPETITIVE`` of the best score the one with fewer parameters wins, refitted on
   everything. An in-sample residual would favour the most flexible shape, which on a noisy
   plateau is usually a flat asymptote above any later target; forecasting the recent part
   is the question actually asked.
4. **Uncertainty.** The band on the target step is the envelope, over the chosen shape and
   those within ``_BAND_COMPETITIVE`` of its score, of the steps at which each crosses
   target ± 2δ, where δ combines the noise of the recent points and the held-out forecast
   error (which grows with each doubling of the steps beyond the last one seen).

``step_for`` is infinite ("never") only when the chosen shape flattens above the target, i.e.
the held-out data says the curve has really levelled off.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_LOG_BINS = 24
_LIN_BINS = 16
_GRID = 32
_TAU_GRID = np.geomspace(0.01, 20.0, _GRID)  # τ as a multiple of the steps seen
_C_GRID = np.geomspace(0.02, 4.0, _GRID)
_SHAPES = ("exp", "power", "exp0", "power0", "loglin")
_TO_ZERO = ("exp0", "power0")
_TWO_PARAM = ("exp0", "power0", "loglin")
  # asymptote fixed at zero: only for positive losses
#: A shape with fewer parameters whose held-out score (mean squared forecast error) is within
#: this factor of the best one is preferred.
_COMPETITIVE = 2.0
#: Shapes whose held-out score is within this factor of the chosen one's (forecast error
#: within 2x) widen the band.
_BAND_COMPETITIVE = 4.0
_Z = 2.0  # band half-width in standard deviations
_BAND_ITERATIONS = 4
_EXP_CAP = 700.0  # math.exp overflows a little above this


@dataclass(frozen=True, slots=True)
class CurveFit:
    shape: str  # "exp", "power", "power0" (power law to zero) or "loglin"
    a: float
    b: float
    p: float  # τ for "exp", c for "power"/"power0", unused for "loglin"
    sigma: float  # noise of the recent points around the fit, in loss units
    n: int
    last_step: float
    #: Residuals are relative (noise proportional to the loss level) rather than absolute.
    relative: bool = False
    #: Forecast error on the held-out recent half (relative or absolute, as ``relative``).
    forecast_error: float = 0.0
    #: Noise of the recent points, relative or absolute as ``relative``.
    noise: float = 0.0
    #: Recent points the noise was measured on.
    recent: int = 1
    #: The other shapes that forecast nearly as well (they widen the band).
    alternatives: tuple[CurveFit, ...] = ()

    def loss_at(self, step: float) -> float:
        return _value(self.shape, self.a, self.b, self.p, step)

    def step_for(self, loss: float) -> float:
        """The step at which the fitted curve reaches ``loss`` (inf: never; 0: already)."""
        return _step_for(self.shape, self.a, self.b, self.p, loss)

    def band_levels(self, loss: float, recent_points: int | None = None,
                    step: float | None = None) -> tuple[float, float]:
        """The loss levels (upper, lower) whose crossings bound when ``loss`` is reached.

        The half-width is ±2 standard deviations of the noise of a mean of ``recent_points``
        recent points and of the forecast error; the forecast error was measured over a
        doubling of the steps (the held-out half) and grows with each further doubling to
        ``step``."""
        m = max(1, self.recent if recent_points is None else recent_points)
        doublings = 1.0
        if step is not None and self.last_step > 0 and step > 2.0 * self.last_step:
            doublings = min(math.log2(step / self.last_step), 64.0)
        err = self.forecast_error * doublings
        d = _Z * math.sqrt(self.noise * self.noise / m + err * err)
        if self.relative:
            d = min(d, 50.0)
            return loss * math.exp(d), loss * math.exp(-d)
        return loss + d, loss - d

    def step_band(self, loss: float, recent_points: int | None = None) -> tuple[float, float]:
        """(earliest, latest) step at which ``loss`` is plausibly reached (inf: never): the
        envelope over this shape and its close alternatives of the crossings of the band."""
        fits = (self, *self.alternatives)
        center = self.step_for(loss)
        early = min([center] + [f.step_for(loss) for f in fits])
        late = max([center] + [f.step_for(loss) for f in fits])
        lo_at, hi_at = early, late
        for _ in range(_BAND_ITERATIONS):  # the width depends on the horizon: iterate
            if math.isinf(lo_at) and math.isinf(hi_at):
                break
            upper, _ = self.band_levels(loss, recent_points, lo_at if math.isfinite(lo_at)
                                        else None)
            _, lower = self.band_levels(loss, recent_points, hi_at if math.isfinite(hi_at)
                                        else None)
            lo_at = min([early] + [f.step_for(upper) for f in fits])
            hi_at = max([late] + [f.step_for(lower) for f in fits])
        return lo_at, hi_at


def _value(shape: str, a: float, b: float, p: float, step: float) -> float:
    k = max(0.0, step)
    if shape in ("exp", "exp0"):
        return a + b * math.exp(-k / p)
    if shape in ("power", "power0"):
        return a + b * float((k + 1.0) ** (-p))
    return a - b * math.log1p(k)


def _step_for(shape: str, a: float, b: float, p: float, loss: float) -> float:
    if not math.isfinite(loss) or b <= 0:
        return math.inf
    if shape == "loglin":
        if loss >= a:
            return 0.0
        e = (a - loss) / b
        return math.inf if e > _EXP_CAP else math.expm1(e)
    if loss <= a:
        return math.inf
    ratio = (loss - a) / b
    if ratio >= 1.0:
        return 0.0
    if shape in ("exp", "exp0"):
        return -p * math.log(ratio)
    e = -math.log(ratio) / p
    return math.inf if e > _EXP_CAP else math.expm1(e)


def _basis(shape: str, p: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(len(p), len(x)) basis values for the nonlinear parameters ``p``."""
    out: np.ndarray
    if shape in ("exp", "exp0"):
        out = np.exp(-x[None, :] / p[:, None])
    elif shape in ("power", "power0"):
        out = np.exp(-p[:, None] * np.log1p(x)[None, :])
    else:
        out = -np.log1p(x)[None, :]
    return out


def _wls(basis: np.ndarray, z: np.ndarray, w: np.ndarray, free_a: bool, positive: bool
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least squares of z = a + b·basis per row: (a, b, weighted SSE); rows with
    b <= 0 (no decay) or, if ``positive``, a < 0 (a positive loss tending below zero) are
    ruled out (SSE inf)."""
    with np.errstate(all="ignore"):
        if free_a:
            sw = w.sum()
            mb = basis @ w / sw
            mz = float(w @ z) / sw
            bc = basis - mb[:, None]
            zc = z - mz
            sbb = (bc * bc) @ w
            sbz = bc @ (w * zc)
            szz = float(w @ (zc * zc))
            b = sbz / sbb
            a = mz - b * mb
        else:
            sbb = (basis * basis) @ w
            sbz = basis @ (w * z)
            szz = float(w @ (z * z))
            b = sbz / sbb
            a = np.zeros_like(b)
        sse = np.maximum(szz - sbz * b, 0.0)
        ok = np.isfinite(a) & np.isfinite(b) & np.isfinite(sse) & (sbb > 1e-300) & (b > 0)
        if positive:
            ok &= a >= 0
    return a, b, np.where(ok, sse, np.inf)


def _fit_shape(shape: str, x: np.ndarray, z: np.ndarray, w: np.ndarray, span: float,
               positive: bool) -> tuple[float, float, float, float] | None:
    """Best (a, b, p, sse) of one shape on weighted points, or None if it cannot decay."""
    free_a = shape not in _TO_ZERO
    positive = positive and shape != "loglin"
    if shape == "loglin":
        grid = np.array([1.0])
    elif shape in ("exp", "exp0"):
        grid = _TAU_GRID * span
    else:
        grid = _C_GRID
    a, b, sse = _wls(_basis(shape, grid, x), z, w, free_a, positive)
    i = int(np.argmin(sse))
    if not math.isfinite(float(sse[i])):
        return None
    best = (float(a[i]), float(b[i]), float(grid[i]), float(sse[i]))
    if 0 < i < len(grid) - 1 and math.isfinite(float(sse[i - 1])) \
            and math.isfinite(float(sse[i + 1])):
        # One parabolic step in log p through the best grid point and its neighbours.
        y0, y1, y2 = float(sse[i - 1]), float(sse[i]), float(sse[i + 1])
        den = y0 - 2.0 * y1 + y2
        if den > 0:
            step = 0.5 * (y0 - y2) / den
            lg = math.log(grid[i]) + step * (math.log(grid[i + 1]) - math.log(grid[i]))
            p = np.array([math.exp(lg)])
            a2, b2, s2 = _wls(_basis(shape, p, x), z, w, free_a, positive)
            if float(s2[0]) < best[3]:
                best = (float(a2[0]), float(b2[0]), float(p[0]), float(s2[0]))
    return best


def _predicted(shape: str, a: float, b: float, p: float, x: np.ndarray) -> np.ndarray:
    out: np.ndarray = a + b * _basis(shape, np.array([p]), x)[0]
    return out


def fit_curve(steps: Sequence[float], losses: Sequence[float]) -> CurveFit | None:
    """Fit the shape that best forecasts the recent loss; None with fewer than 5 finite points,
    or when the loss does not decay."""
    try:
        xs = np.asarray(steps, dtype=float)
        ys = np.asarray(losses, dtype=float)
    except (TypeError, ValueError):
        return None
    if xs.ndim != 1 or xs.shape != ys.shape:
        return None
    with np.errstate(all="ignore"):
        keep = np.isfinite(xs) & np.isfinite(ys) & (xs >= 0) & (np.abs(ys) < 1e150) \
            & (xs < 1e150)
    x, y = xs[keep], ys[keep]
    if len(x) < 5:
        return None
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    bx, bz, bn, edges = _bins(x, y)
    # Leave out a warm-up: the bins before the highest median in the first half.
    peak = int(np.argmax(bz[: max(1, len(bz) // 2)]))
    if peak:
        bx, bz, bn, edges = bx[peak:], bz[peak:], bn[peak:], edges[peak:]
        x, y = x[edges[0]:], y[edges[0]:]
    if len(bx) < 3:
        return None
    # Relative residuals need positive levels within a range that squares without overflow.
    relative = bool(np.all(bz > 0)) and float(bz.max() / bz.min()) < 1e100
    span = max(float(x[-1]), 1.0)
    u = np.log1p(bx)
    lo, hi = float(u[0]), float(u[-1])
    recency = 0.25 + 0.75 * ((u - lo) / (hi - lo) if hi > lo else np.ones_like(u))
    w = bn * recency
    if relative:
        w = w / (bz / bz.max()) ** 2
    shapes = [s for s in _SHAPES if relative or s not in _TO_ZERO]
    # Held-out choice: fit on the first half of the steps, forecast the second half.
    train = bx <= 0.5 * (bx[0] + bx[-1])
    scores: dict[str, float] = {}
    if train.sum() >= 4 and (~train).sum() >= 2:
        for s in shapes:
            f = _fit_shape(s, bx[train], bz[train], w[train], span, relative)
            if f is None:
                continue
            pred = _predicted(s, f[0], f[1], f[2], bx[~train])
            resid = _residuals(bz[~train], pred, relative)
            wv = w[~train] * (bz[~train] / bz.max()) ** 2 if relative else w[~train]
            with np.errstate(all="ignore"):
                score = float(wv @ (resid * resid) / wv.sum())
            if math.isfinite(score):
                scores[s] = score
    fits: dict[str, tuple[float, float, float, float]] = {}
    for s in shapes:
        f = _fit_shape(s, bx, bz, w, span, relative)
        if f is not None:
            fits[s] = f
    if not fits:
        return None
    if not scores:  # too few points to hold some out: the in-sample residual decides
        wsum = float(w.sum())
        scores = {s: f[3] / wsum for s, f in fits.items()}
    ranked = sorted((sc, s) for s, sc in scores.items() if s in fits)
    if not ranked:
        return None
    best_score, best = ranked[0]
    # Parsimony: a shape with fewer parameters that forecasts nearly as well is preferred.
    simple = [(sc, s) for sc, s in ranked
              if s in _TWO_PARAM and sc <= _COMPETITIVE * best_score + 1e-24]
    if simple and best not in _TWO_PARAM:
        best_score, best = simple[0]
        ranked = [r for r in ranked if r[1] == best] + [r for r in ranked if r[1] != best]
    # Noise of the recent raw points (second half of the steps) around the chosen curve.
    a, b, p, _ = fits[best]
    recent = x >= 0.5 * (x[0] + x[-1])
    rx, ry = x[recent], y[recent]
    fitted = _predicted(best, a, b, p, rx)
    resid = _residuals(ry, fitted, relative)
    resid = resid[np.isfinite(resid)]
    noise = 1.4826 * float(np.median(np.abs(resid - np.median(resid)))) if len(resid) else 0.0
    noise = min(noise, 1e6) if math.isfinite(noise) else 0.0
    level = abs(_value(best, a, b, p, float(x[-1])))
    sigma = noise * level if relative else noise
    if not math.isfinite(sigma):
        sigma = 0.0
    forecast = min(math.sqrt(best_score), 1e6)
    top = ranked[0][0]
    alts = tuple(
        CurveFit(s, *fits[s][:3], sigma, len(x), float(x[-1]), relative)
        for sc, s in ranked[1:]
        if sc <= _BAND_COMPETITIVE * top + 1e-24
    )
    return CurveFit(best, a, b, p, sigma, len(x), float(x[-1]), relative, forecast, noise,
                    int(recent.sum()), alts)


def _residuals(z: np.ndarray, pred: np.ndarray, relative: bool) -> np.ndarray:
    """Data minus fit: log ratio when relative (a fit at or below zero is 20 nepers off)."""
    out: np.ndarray
    if not relative:
        out = z - pred
        return out
    with np.errstate(all="ignore"):
        r = np.log(np.where(z > 0, z, np.nan) / np.where(pred > 0, pred, np.nan))
    out = np.where(np.isfinite(r), r, np.where(z > 0, 20.0, np.nan))
    return out


def _bins(x: np.ndarray, y: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Median step, median loss, count and first index of each non-empty bin.

    Bin edges are equally spaced in log step (fine where the curve falls fast, early) merged
    with edges equally spaced in step (so the recent half, which the held-out choice scores
    on, keeps a fair number of bins)."""
    n = len(x)
    u = np.log1p(x)
    cut_log = np.searchsorted(u, np.linspace(float(u[0]), float(u[-1]), _LOG_BINS + 1)[:-1])
    cut_lin = np.searchsorted(x, np.linspace(float(x[0]), float(x[-1]), _LIN_BINS + 1)[:-1])
    starts = np.unique(np.concatenate([cut_log, cut_lin]))
    bounds = [int(i) for i in starts if i < n] + [n]
    bx, bz, bn, first = [], [], [], []
    for s, e in itertools.pairwise(bounds):
        if e <= s:
            continue
        bx.append(float(np.median(x[s:e])))
        bz.append(float(np.median(y[s:e])))
        bn.append(e - s)
        first.append(s)
    return np.array(bx), np.array(bz), np.array(bn, dtype=float), np.array(first)


@dataclass(frozen=True, slots=True)
class Prediction:
    """Seconds from now; inf when the fit says never. (low, high) is the uncertainty band.

    ``target_step*`` give the same in steps (absolute step numbers)."""

    target_s: float | None
    target_low_s: float | None
    target_high_s: float | None
    finish_s: float
    target_step: float | None = None
    target_step_low: float | None = None
    target_step_high: float | None = None


def predict(
    fit: CurveFit | None,
    step_now: float,
    total_steps: float,
    steps_per_s: float,
    target: float | None,
    recent_points: int | None = None,
) -> Prediction:
    """Time to the target and to completion at the current rate.

    ``recent_points`` overrides how many recent points the noise term is averaged over
    (default: those the fit measured it on)."""
    rate = max(steps_per_s, 1e-12)
    finish = max(0.0, total_steps - step_now) / rate
    if target is None or fit is None:
        return Prediction(None, None, None, finish)
    k = fit.step_for(target)
    k_lo, k_hi = fit.step_band(target, recent_points)

    def when(step: float) -> float:
        return math.inf if math.isinf(step) else max(0.0, step - step_now) / rate

    return Prediction(when(k), when(k_lo), when(k_hi), finish, k, k_lo, k_hi)
