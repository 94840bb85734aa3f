"""How well the learning-curve fit predicts the time to a target loss, on the shipped profiles.

For each real profile and each target (the smoothed loss the job reaches at 60% and at 90% of
its run: late targets, since these curves reach 90% of their reduction within the first tenth
of the run), fit the curve on the loss logged in the first 10%, 25% and 50% of the
run, predict the iteration at which the target is reached, and compare with the iteration at
which the recorded curve actually reaches it. At a constant iteration rate the error in time
equals the error in iterations; it is reported as a % of the actual time to the target.
Targets already reached at the observation point are skipped (nothing to predict).

Usage: python benchmarks/predict_error.py
"""

from __future__ import annotations

import math
import statistics

from specon.core.predict import fit_curve
from specon.sim.engine import milestone_iteration, smoothed
from specon.sim.experiments import shipped_profiles

FRACTIONS = (0.10, 0.25, 0.50)
LEVELS = (0.60, 0.90)


def main() -> None:
    errors: dict[float, list[float]] = {f: [] for f in FRACTIONS}
    print(f"{'profile':18} {'target':>7} " + " ".join(f"{'at ' + str(int(f * 100)) + '%':>9}"
                                                     for f in FRACTIONS))
    for name, prof in sorted(shipped_profiles().items()):
        sm = smoothed(prof.loss)
        n = len(prof.loss)
        steps = [(i + 1) * prof.iterations / n for i in range(n)]
        for level in LEVELS:
            target = min(sm[: int(n * level)])
            actual = milestone_iteration(prof, target)
            if actual is None:
                continue
            cells = []
            for f in FRACTIONS:
                seen = max(5, int(n * f))
                if steps[seen - 1] >= actual:
                    cells.append(f"{'reached':>9}")
                    continue
                fit = fit_curve(steps[:seen], prof.loss[:seen])
                pred = fit.step_for(target) if fit else math.inf
                if math.isinf(pred):
                    cells.append(f"{'never':>9}")
                    errors[f].append(math.inf)
                    continue
                err = 100.0 * (pred - actual) / actual
                errors[f].append(err)
                cells.append(f"{err:+8.1f}%")
            print(f"{name:18} {int(level * 100):>6}% " + " ".join(cells))
    print()
    for f in FRACTIONS:
        finite = [abs(e) for e in errors[f] if math.isfinite(e)]
        never = sum(1 for e in errors[f] if math.isinf(e))
        if finite:
            print(f"observed {int(f * 100)}% of the run: {len(errors[f])} predictions, median "
                  f"|error| {statistics.median(finite):.1f}%, within ±25%: "
                  f"{sum(1 for e in finite if e <= 25)}/{len(errors[f])}, 'never': {never}")


if __name__ == "__main__":
    main()
