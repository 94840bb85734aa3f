"""Issue 28: the shipped policy against the default scheduler where it used to lose, each case
run by the simulator on workloads outside the random suite's draws. Every test here failed
before the rules of specon.core.progress changed (starved jobs capped at their equal share,
a progressing job's key at most EARLY_FACTOR times its work done); the figures beside each
are what the old rules gave. The widened suite itself is a benchmark (benchmarks/suite.py)."""

from __future__ import annotations

import statistics

import pytest

from specon.core.policy import SHIPPED
from specon.sim.experiments import EXPERIMENTS
from specon.sim.generate import FAMILIES, Shape, family_workload, random_workload
from specon.sim.model import RunResult, SimConfig
from specon.sim.noise import NOISE
from specon.sim.runner import run_one

pytestmark = pytest.mark.slow

#: Overload: 2-3 workers offered 2-6 times what they can serve.
OVERLOAD = Shape(workers=(2, 3), load=(2.0, 6.0))
CONFIG = SimConfig(record_timeline=False)


def _pair(workload, config: SimConfig = CONFIG, seed: int = 0) -> tuple[RunResult, RunResult]:
    return run_one(workload, "default", config, seed), run_one(workload, SHIPPED, config, seed)


def test_overloaded_nodes_spend_no_more_cpu_than_equal_shares_on_the_same_jobs():
    """Under overload most jobs count as starved; each used to get as many cores and threads as
    it could hold, where its speed-up was flat: on workload 1009 the shipped policy gave
    1.53 times the CPU-seconds default gave for the same jobs (0.95 now)."""
    for index in range(1000, 1012):
        base, mine = _pair(random_workload(index, OVERLOAD))
        used_base = sum(j.cpu_s for j in base.jobs)
        used_mine = sum(j.cpu_s for j in mine.jobs)
        assert used_mine <= used_base, (index, used_mine / used_base)


def test_overload_gains_average_completion_and_keeps_makespan():
    """The old rules lost makespan by up to 49% on these shapes and time to 90% by up to 114%;
    average completion must gain, and makespan and time to 90% of the loss reduction stay
    within the issue's bars (5% and 10%), as means over two seeds like the suite's."""
    keys = ("avg_completion_s", "makespan_s", "avg_time_to_90_s")
    for index in range(1000, 1012):
        workload = random_workload(index, OVERLOAD)
        runs = [_pair(workload, seed=seed) for seed in (0, 1)]
        b = {k: statistics.fmean(base.summary()[k] for base, _ in runs) for k in keys}
        m = {k: statistics.fmean(mine.summary()[k] for _, mine in runs) for k in keys}
        assert m["avg_completion_s"] < b["avg_completion_s"], index
        assert m["makespan_s"] <= 1.05 * b["makespan_s"], (index, m["makespan_s"] / b["makespan_s"])
        assert m["avg_time_to_90_s"] <= 1.10 * b["avg_time_to_90_s"], (index, m, b)


def test_paper30_time_to_90_is_no_worse_than_default():
    """paper-30's time to 90% of the loss reduction was +23% against default (new jobs waited
    behind every shorter one); a job's first minutes now come first."""
    build = EXPERIMENTS["paper-30"].build
    base, mine = [], []
    for seed in range(3):
        b, m = _pair(build(seed), seed=seed)
        base.append(b.summary()["avg_time_to_90_s"])
        mine.append(m.summary()["avg_time_to_90_s"])
    assert statistics.fmean(mine) <= statistics.fmean(base)


def test_time_to_90_without_declared_totals_and_with_misjudged_costs():
    """Half the jobs declare no total and every step cost is misjudged by up to 50%: the old
    rules lost up to 73% time to 90% (workloads 3, 8 and 14 of the suite: +62%, +73%, +24%);
    none may now lose more than 10%."""
    config = SimConfig(record_timeline=False, unknown_total_share=0.5, cost_error=0.5)
    for index in (3, 8, 14):
        base, mine = _pair(random_workload(index), config)
        b, m = base.summary()["avg_time_to_90_s"], mine.summary()["avg_time_to_90_s"]
        assert m <= 1.10 * b, (index, m / b)


def _seed_means(workload, seeds=(0, 1, 2), config: SimConfig = CONFIG
                ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Default's and the shipped policy's summaries as means over ``seeds`` (the suite's way),
    and each job's completion under the policy over its completion under default."""
    runs = [_pair(workload, config, seed) for seed in seeds]
    keys = ("avg_completion_s", "makespan_s", "avg_time_to_90_s")
    base = {k: statistics.fmean(b.summary()[k] for b, _ in runs) for k in keys}
    mine = {k: statistics.fmean(m.summary()[k] for _, m in runs) for k in keys}
    per_job: dict[str, list[tuple[float, float]]] = {}
    for b, m in runs:
        done = {j.name: j.completion_s for j in b.jobs}
        for j in m.jobs:
            per_job.setdefault(j.name, []).append((done[j.name], j.completion_s))
    slowdown = {n: statistics.fmean(m for _, m in v) / statistics.fmean(b for b, _ in v)
                for n, v in per_job.items()}
    return base, mine, slowdown


def test_no_job_takes_twice_its_default_time_on_an_overloaded_pair_of_workers():
    """Overload workload 10 (28 jobs on a 16-core and a 4-core worker): a short job that scales
    to 16 cores took 2.35 times its default completion (seed mean; 3.85 in one seed), placed
    on the 4-core worker because a long single-threaded job served first on the 16-core one
    was predicted to hold all of it (the node model now lets a job use only what it can)."""
    _, _, slowdown = _seed_means(random_workload(1010, OVERLOAD))
    worst = max(slowdown, key=slowdown.__getitem__)
    assert slowdown[worst] <= 2.0, (worst, slowdown[worst])


def test_heavy_tailed_makespan_within_five_percent_of_default():
    """Heavy-tailed workload 11 (35 jobs of 1-240 minutes on 3 workers): makespan was +5.2%
    over default (seed mean)."""
    base, mine, _ = _seed_means(random_workload(4011, FAMILIES["heavy-tailed"][1]))
    assert mine["makespan_s"] <= 1.05 * base["makespan_s"], mine["makespan_s"] / base["makespan_s"]


def test_no_job_takes_twice_its_default_time_with_noisy_logs_on_heterogeneous_speeds():
    """Heterogeneous workload 8 of the widened suite (50 jobs on workers of speeds 0.44-3.92)
    with the suite's standard noise (half the totals unknown, misjudged step costs, noisy
    losses): a short job that levels off in its first seconds was held at the floor on the
    fastest worker, behind its equal share by up to half its steps, and took 2.33 times its
    default completion (seed mean); a job is now served first once it falls behind equal
    shares by a quarter of its steps (FAIR_LAG)."""
    config = SimConfig(record_timeline=False, **NOISE["standard"])
    _, _, slowdown = _seed_means(family_workload("heterogeneous", 8), config=config)
    worst = max(slowdown, key=slowdown.__getitem__)
    assert slowdown[worst] <= 2.0, (worst, slowdown[worst])


def test_overload_makespan_within_five_percent_on_unlabelled_nodes():
    """Overload workload 8 of the widened suite (52 jobs on workers of 2, 4 and 32 CPUs), as
    the manager sees it with no speed labels (speeds as the agents measure them): the longest
    job, single-threaded, was held at the floor for two minutes behind shorter ones on a busy
    4-core worker, and the cluster finished 6.2% later than under default (seed mean); the
    node's last job now keeps its core (specon.core.progress.critical): +1.7%."""
    config = SimConfig(record_timeline=False, manager_view=True, labelled_speeds=False)
    base, mine, _ = _seed_means(family_workload("overload", 8), config=config)
    assert mine["makespan_s"] <= 1.05 * base["makespan_s"], mine["makespan_s"] / base["makespan_s"]


def test_a_new_job_is_not_squeezed_out_by_the_nodes_last_job():
    """Large workload 32 of the 180 (131 jobs on 27 workers): with the last-job rule alone a
    14-s job with a 27-s deadline kept the floor on a 2-CPU worker behind a starved job and
    the node's last job, 7.54 times its default completion; jobs that short go first."""
    _, _, slowdown = _seed_means(random_workload(3032, FAMILIES["large"][1]))
    worst = max(slowdown, key=slowdown.__getitem__)
    assert slowdown[worst] <= 2.0, (worst, slowdown[worst])
