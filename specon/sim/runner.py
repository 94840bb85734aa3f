"""Run policies over seeds and aggregate: means, 95% intervals, % against default, headroom."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from scipy.stats import t as student_t

from specon.core.policy import POLICIES, canonical, lookup
from specon.sim.engine import Simulator
from specon.sim.model import RunResult, SimConfig
from specon.sim.oracle import simulate_oracle
from specon.workload.models import Workload


def t95(df: int) -> float:
    """The two-sided 95% Student t critical value for ``df`` degrees of freedom (the 0.975
    quantile), exact at every ``df``; the one place the simulator and the benchmarks take it."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    return float(student_t.ppf(0.975, df))


#: Metrics compared across policies (lower is better for all of them).
METRICS = ("avg_completion_s", "p50_completion_s", "p95_completion_s", "makespan_s",
           "avg_time_to_90_s")


@dataclass(frozen=True)
class Stat:
    mean: float
    ci95: float  # half-width of the 95% interval (0 with one sample)
    n: int

    @staticmethod
    def of(values: Sequence[float]) -> Stat:
        vals = [v for v in values if math.isfinite(v)]
        if not vals:
            return Stat(math.nan, math.nan, 0)
        if len(vals) == 1:
            return Stat(vals[0], 0.0, 1)
        n = len(vals)
        return Stat(statistics.fmean(vals), t95(n - 1) * statistics.stdev(vals) / math.sqrt(n), n)


@dataclass
class Matrix:
    """All runs of one workload: ``runs[policy][i]`` is the run with ``seeds[i]``."""

    name: str
    seeds: list[int]
    policies: list[str]
    config: SimConfig
    runs: dict[str, list[RunResult]] = field(default_factory=dict)

    def metric(self, policy: str, metric: str) -> Stat:
        return Stat.of([float(r.summary()[metric]) for r in self.runs[policy]])

    def vs_default(self, policy: str, metric: str) -> Stat:
        """Paired change against default, in % (negative = better)."""
        if "default" not in self.runs:
            return Stat(math.nan, math.nan, 0)
        vals = []
        for mine, base in zip(self.runs[policy], self.runs["default"], strict=True):
            b = float(base.summary()[metric])
            vals.append(100.0 * (float(mine.summary()[metric]) - b) / b if b else math.nan)
        return Stat.of(vals)

    def headroom(self, policy: str, metric: str) -> Stat:
        """Share (%) of the oracle's gain over default that the policy captures; runs where the
        oracle is not better than default have no headroom and are left out (a ratio of two
        negatives would read as a gain)."""
        if "default" not in self.runs or "oracle" not in self.runs:
            return Stat(math.nan, math.nan, 0)
        vals = []
        for mine, base, orc in zip(self.runs[policy], self.runs["default"], self.runs["oracle"],
                                   strict=True):
            b = float(base.summary()[metric])
            gap = b - float(orc.summary()[metric])
            if gap > 1e-9 * max(1.0, abs(b)):
                vals.append(100.0 * (b - float(mine.summary()[metric])) / gap)
        return Stat.of(vals)

    def to_json(self, include_timelines: bool = True) -> dict[str, Any]:
        aggregate: dict[str, Any] = {}
        for p in self.policies:
            aggregate[p] = {
                m: {**asdict(self.metric(p, m)),
                    "vs_default_pct": asdict(self.vs_default(p, m)),
                    "headroom_pct": asdict(self.headroom(p, m))}
                for m in METRICS
            }
            for m in ("migrations", "targets_met", "deadlines_met"):
                aggregate[p][m] = asdict(self.metric(p, m))
        runs = []
        for p in self.policies:
            for r in self.runs[p]:
                entry: dict[str, Any] = {
                    "policy": p, "seed": r.seed, "summary": r.summary(),
                    "jobs": [j.to_dict() for j in r.jobs],
                }
                if include_timelines:
                    entry["cpu"] = {w: [list(x) for x in s] for w, s in r.cpu.items()}
                    entry["jobs_per_worker"] = {w: [list(x) for x in s]
                                                for w, s in r.counts.items()}
                runs.append(entry)
        cfg = asdict(self.config)
        return {"format": "specon-result/v1", "workload": self.name, "seeds": self.seeds,
                "policies": self.policies, "config": cfg, "aggregate": aggregate, "runs": runs}


def run_one(workload: Workload, policy: str, config: SimConfig, seed: int,
            job_done: Callable[[int, int], None] | None = None) -> RunResult:
    """One policy on one workload. ``job_done(finished, jobs)`` after each job finishes (the
    progress of a long run; the oracle, one linear programme, reports none)."""
    if policy == "oracle":
        return simulate_oracle(workload, seed)
    sim = Simulator(workload, lookup(policy), config, seed)
    finished: Callable[[float], None] | None = None
    if job_done is not None:
        report, total, told = job_done, len(workload.jobs), [0]

        def each_finish(_event: float) -> None:
            # called on every finish event, a stale one (a job moved since) included: the
            # count is the simulator's own, reported when it grows
            done = total - sim.remaining
            if done > told[0]:
                told[0] = done
                report(done, total)

        finished = each_finish
    return sim.run(progress=finished)


def run_matrix(
    name: str,
    build: Callable[[int], Workload],
    policies: Sequence[str],
    seeds: Sequence[int],
    config: SimConfig,
    tick: Callable[[str, int], None] | None = None,
    start: Callable[[str, int], None] | None = None,
    job_done: Callable[[int, int], None] | None = None,
) -> Matrix:
    """Every policy on the same workload per seed (paired comparison). `start(policy, seed)`
    is called before each run, `job_done(finished, jobs)` as its jobs finish and
    `tick(policy, seed)` after it (progress reports). An old policy name runs, and is
    reported, as its new one (with a warning)."""
    policies = [canonical(p) for p in policies]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r} (known: {', '.join(POLICIES)})")
    mx = Matrix(name=name, seeds=list(seeds), policies=list(policies), config=config)
    for p in policies:
        mx.runs[p] = []
    for seed in seeds:
        wl = build(seed)
        for p in policies:
            if start is not None:
                start(p, seed)
            mx.runs[p].append(run_one(wl, p, config, seed, job_done))
            if tick is not None:
                tick(p, seed)
    return mx
