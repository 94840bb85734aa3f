"""How well the learning-curve fit predicts the time to a target loss, on the shipped profiles.

For each real profile and each target, fit the curve on the loss logged in the first 10%, 25%
and 50% of the run, predict the iteration at which the target is reached, and compare with
the iteration at which the recorded curve (its running median, as the simulator judges
"reached") actually reaches it. Targets: the smoothed loss the job reaches at 25% of its run
(an early, typical target) and at 60% and 90% (late targets on the noisy tail: these curves
reach 90% of their reduction within the first tenth of the run). At a constant iteration rate
the error in time equals the error in iterations; it is reported as a % of the actual
iterations to the target. Targets already reached at the observation point are skipped.

Two predictors run side by side on the same points: ``new`` (``specon.core.predict``) and
``old``, the previous fit kept below as a baseline (exp-decay or power law fitted to the raw
points, the smaller in-sample residual wins, band target ± 2σ/√10). "never" (the fit says the
target is never reached) counts as a miss: in the medians it is an infinite error. Coverage
is the share of predictions whose band contains the actual iteration.

Usage: python benchmarks/predict_error.py
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specon.core.predict import fit_curve
from specon.sim.experiments import shipped_profiles
from specon.sim.milestones import milestone_iteration, smoothed

FRACTIONS = (0.10, 0.25, 0.50)
LEVELS = (0.25, 0.60, 0.90)


# --- The previous predictor, as a baseline (not part of the library). ---

@dataclass(frozen=True)
class _OldFit:
    shape: str
    a: float
    b: float
    p: float
    sigma: float

    def step_for(self, loss: float) -> float:
        if self.b <= 0 or loss <= self.a:
            return math.inf
        ratio = (loss - self.a) / self.b
        if ratio >= 1.0:
            return 0.0
        if self.shape == "exp":
            return -self.p * math.log(ratio)
        return float(ratio ** (-1.0 / self.p)) - 1.0

    def step_band(self, loss: float) -> tuple[float, float]:
        band = 2.0 * self.sigma / math.sqrt(10)
        return self.step_for(loss + band), self.step_for(loss - band)


def old_fit_curve(steps: Sequence[float], losses: Sequence[float]) -> _OldFit | None:
    pts = [(float(k), float(v)) for k, v in zip(steps, losses, strict=True)
           if math.isfinite(k) and math.isfinite(v) and k >= 0]
    if len(pts) < 5:
        return None
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    span = max(float(x.max()), 1.0)

    def solve(basis: np.ndarray) -> tuple[float, float, float]:
        design = np.column_stack([np.ones_like(basis), basis])
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        resid = y - design @ coef
        return float(coef[0]), float(coef[1]), float(resid @ resid)

    best: tuple[float, str, float, float, float] | None = None
    for tau in np.geomspace(span / 100.0, span * 20.0, 48):
        a, b, sse = solve(np.exp(-x / tau))
        if b > 0 and (best is None or sse < best[0]):
            best = (sse, "exp", a, b, float(tau))
    for c in np.geomspace(0.05, 4.0, 48):
        a, b, sse = solve((x + 1.0) ** (-c))
        if b > 0 and (best is None or sse < best[0]):
            best = (sse, "power", a, b, float(c))
    if best is None:
        return None
    sse, shape, a, b, p = best
    return _OldFit(shape, a, b, p, math.sqrt(sse / max(1, len(pts) - 3)))


# --- The comparison. ---

@dataclass
class _Outcome:
    err: float  # % of the actual iterations; inf: "never"
    covered: bool


def _evaluate(fit: object, target: float, actual: float) -> _Outcome:
    if fit is None:
        return _Outcome(math.inf, False)
    pred = fit.step_for(target)  # type: ignore[attr-defined]
    lo, hi = fit.step_band(target)  # type: ignore[attr-defined]
    err = math.inf if math.isinf(pred) else 100.0 * (pred - actual) / actual
    return _Outcome(err, lo <= actual <= hi)


def _cell(o: _Outcome) -> str:
    mark = "*" if o.covered else " "
    return f"{'never':>8}{mark}" if math.isinf(o.err) else f"{o.err:+7.0f}%{mark}"


def _median_abs(errs: list[float]) -> float:
    return statistics.median(abs(e) for e in errs) if errs else math.nan


def _fmt(v: float) -> str:
    return "never" if math.isinf(v) else f"{v:.0f}%"


def _summary(label: str, outs: list[_Outcome]) -> str:
    errs = [o.err for o in outs]
    n = len(outs)
    within = sum(1 for e in errs if abs(e) <= 25)
    never = sum(1 for e in errs if math.isinf(e))
    cov = sum(1 for o in outs if o.covered)
    return (f"{label:4} median |error| {_fmt(_median_abs(errs)):>6}, within ±25%: "
            f"{within:>2}/{n}, 'never': {never:>2}/{n}, band covers: {cov:>2}/{n}")


def _time_per_call(fn: Callable[[list[float], list[float]], object]) -> float:
    rng = np.random.default_rng(0)
    x = [float(k) for k in range(0, 5000, 10)]
    y = [0.1 + 2.0 * math.exp(-k / 900) + float(rng.normal(0, 0.02)) for k in x]
    fn(x, y)
    t = time.perf_counter()
    for _ in range(20):
        fn(x, y)
    return (time.perf_counter() - t) / 20 * 1e3


def main() -> None:
    outs: dict[tuple[str, float, str], list[_Outcome]] = {}
    print("error of the predicted iteration at which the target is reached, % of the actual "
          "(* = the band contains it)")
    print(f"{'profile':18} {'target':>7}  " + "  ".join(
        f"{'new at ' + str(int(f * 100)) + '%':>9} {'old':>9}" for f in FRACTIONS))
    for name, prof in sorted(shipped_profiles().items()):
        sm = smoothed(prof.loss)
        n = len(prof.loss)
        steps = [(i + 1) * prof.iterations / n for i in range(n)]
        for level in LEVELS:
            target = min(sm[: int(n * level)])
            actual = milestone_iteration(prof, target)
            if actual is None:
                continue
            group = "early" if level < 0.5 else "late"
            cells = []
            for f in FRACTIONS:
                seen = max(5, int(n * f))
                if steps[seen - 1] >= actual:
                    cells.append(f"{'reached':>9} {'':>9}")
                    continue
                new = _evaluate(fit_curve(steps[:seen], prof.loss[:seen]), target, actual)
                old = _evaluate(old_fit_curve(steps[:seen], prof.loss[:seen]), target, actual)
                outs.setdefault((group, f, "new"), []).append(new)
                outs.setdefault((group, f, "old"), []).append(old)
                cells.append(f"{_cell(new)} {_cell(old)}")
            print(f"{name:18} {int(level * 100):>6}%  " + "  ".join(cells))
    print()
    for group, what in (("early", "target = loss at 25% of the run"),
                        ("late", "targets = loss at 60% and 90% of the run")):
        for f in FRACTIONS:
            if (group, f, "new") not in outs:
                continue
            print(f"{group} ({what}), observed {int(f * 100)}% of the run:")
            for who in ("new", "old"):
                print("  " + _summary(who, outs[(group, f, who)]))
    print()
    every = {who: [o for (g, f, w), v in outs.items() if w == who for o in v]
             for who in ("new", "old")}
    med = {who: _median_abs([o.err for o in every[who]]) for who in every}
    print("all predictions:")
    for who in ("new", "old"):
        print("  " + _summary(who, every[who]))
    paired = [(abs(a.err), abs(b.err)) for a, b in zip(every["new"], every["old"], strict=True)
              if math.isfinite(a.err) and math.isfinite(b.err)]
    ratio = "old median is 'never'" if math.isinf(med["old"]) else \
        f"{med['old'] / max(med['new'], 1e-9):.1f}x smaller"
    print(f"  new vs old, median |error| over all predictions: {_fmt(med['new'])} vs "
          f"{_fmt(med['old'])} ({ratio})")
    if paired:
        pn = statistics.median(p[0] for p in paired)
        po = statistics.median(p[1] for p in paired)
        print(f"  where both predict a finite time ({len(paired)}): median |error| "
              f"{pn:.0f}% vs {po:.0f}% ({po / max(pn, 1e-9):.1f}x smaller)")
    print(f"  time per fit (500 points): new {_time_per_call(fit_curve):.2f} ms, "
          f"old {_time_per_call(old_fit_curve):.2f} ms")


if __name__ == "__main__":
    main()
