"""Noisy logs: the loss a policy reads, as opposed to the loss a job really reaches.

A profile's loss is a real log (docs/workload-format.md) and already carries its measured noise;
a robustness run (SimConfig.loss_noise, loss_spikes, loss_bump; ``--noise`` of
benchmarks/suite.py) adds more to what the policies see (categories, growth, fitted targets),
never to what the metrics count (time to 90% of the loss reduction, the target reached): those
come from the profile's own log. Each job's noise is drawn from the run's seed and its name, so
a run is reproducible and every policy of a seed sees the same noisy log.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

#: The suite's noise settings (benchmarks/suite.py --noise, docs/experiments.md): what a
#: policy knows of the jobs, as SimConfig fields. The profiles' losses are real logs, already
#: as noisy as measured (relative scatter around their running median 0.01-1.6 per line,
#: median 0.12; a third to a half of their steps go up); `standard` adds as much again, a
#: spike on 2% of the lines and one slow bump of a tenth of the loss's range, and `heavy` is
#: issue 28's "heavy noise".
NOISE: dict[str, dict[str, float]] = {
    "none": {},
    "standard": {"unknown_total_share": 0.5, "cost_error": 0.25, "loss_noise": 0.1,
                 "loss_spikes": 0.02, "loss_bump": 0.1},
    "heavy": {"unknown_total_share": 1.0, "cost_error": 0.5, "loss_noise": 0.3,
              "loss_spikes": 0.05, "loss_bump": 0.3},
}


#: Where the slow bump may peak, as a share of the log, and its width (standard deviation).
BUMP_AT = (0.2, 0.7)
BUMP_WIDTH = 0.08
#: A spike multiplies its line by 1 + U(SPIKE): a bad batch, a restarted data loader.
SPIKE = (0.5, 2.0)


def noisy_log(loss: Sequence[float], rng: random.Random, noise: float = 0.0,
              spikes: float = 0.0, bump: float = 0.0) -> tuple[float, ...]:
    """``loss`` as a noisier logger would have written it: each line times ``exp(noise * g)``
    (g standard normal), a share ``spikes`` of the lines spiking, and one slow bump of height
    ``bump`` times the log's range (a loss that rises for a while, then falls again)."""
    n = len(loss)
    if n == 0 or not (noise or spikes or bump):
        return tuple(loss)
    at = rng.uniform(*BUMP_AT) * n
    width = max(1.0, BUMP_WIDTH * n)
    height = bump * (max(loss) - min(loss))
    out = []
    for i, v in enumerate(loss):
        seen = v * math.exp(noise * rng.gauss(0.0, 1.0))
        if rng.random() < spikes:
            seen *= 1.0 + rng.uniform(*SPIKE)
        out.append(seen + height * math.exp(-0.5 * ((i - at) / width) ** 2))
    return tuple(out)
