"""Simulator behaviour: physics of CPU sharing, migration accounting, determinism."""

import pytest
from synth import workload

from specon.core.policy import POLICIES
from specon.sim.alloc import by_priority, greedy_marginal, waterfill
from specon.sim.engine import Simulator
from specon.sim.model import SimConfig
from specon.sim.oracle import simulate_oracle


def run(policy: str, **kw):
    wl = kw.pop("wl", None) or workload(jobs=16, workers=2, spacing=8.0)
    return wl, Simulator(wl, POLICIES[policy], SimConfig(**kw), seed=1).run()


def test_waterfill_is_work_conserving_and_capped():
    assert waterfill(4, [0.5, 4, 4], [1, 1, 1]) == pytest.approx([0.5, 1.75, 1.75])
    assert waterfill(4, [1, 1], [1, 1]) == pytest.approx([1, 1])  # idle CPU, nobody can use it
    assert by_priority(2, [2, 2, 2], [1, 0, 1]) == pytest.approx([0, 2, 0])
    got = greedy_marginal(2, [2, 2], [1.0, 0.1], [lambda c: c, lambda c: c], 0.5)
    assert got == pytest.approx([2, 0])


def test_single_job_runs_at_profile_speed():
    wl = workload(jobs=1, workers=1)
    res = Simulator(wl, POLICIES["default"]).run()
    prof = wl.profiles["slow"]
    expected = prof.iterations * prof.cpu_seconds_per_iteration / prof.speed(2)
    assert res.jobs[0].completion_s == pytest.approx(expected)


@pytest.mark.parametrize("policy", ["default", "flowcon", "progress-equal-share",
                                    "progress", "las", "slaq"])
def test_every_job_finishes_and_cpu_never_exceeds_the_worker(policy):
    wl, res = run(policy)
    assert all(j.finish_s is not None and j.finish_s >= j.submit_s for j in res.jobs)
    cpus = {w.name: w.cpus for w in wl.cluster.workers}
    for w, series in res.cpu.items():
        assert all(0 <= used <= cpus[w] + 1e-9 for _, used in series)
    for j in res.jobs:
        prof = wl.profiles[j.profile]
        fastest = prof.iterations * prof.cpu_seconds_per_iteration / prof.speed(prof.max_cores)
        assert j.completion_s >= fastest - 1e-6


def test_runs_are_deterministic():
    _, a = run("progress")
    _, b = run("progress")
    assert [j.finish_s for j in a.jobs] == [j.finish_s for j in b.jobs]


def test_specon_migrates_at_most_once_and_pays_the_cost():
    wl = workload(jobs=24, workers=3, spacing=4.0)
    res = Simulator(wl, POLICIES["paper-specon"], SimConfig(alpha=0.5, interval_s=10)).run()
    moved = [j for j in res.jobs if j.migrations]
    assert moved, "a crowded workload with a high alpha must migrate something"
    for j in res.jobs:
        kinds = [m["kind"] for m in j.migrations]
        assert kinds.count("migrate") <= 1 and kinds.count("rebalance") <= 1
        for m in j.migrations:
            assert m["from"] != m["to"] and m["seconds"] >= 3.0


def test_flowcon_changes_shares_on_a_crowded_worker():
    wl = workload(jobs=10, workers=1, spacing=3.0)
    base = Simulator(wl, POLICIES["default"]).run()
    fc = Simulator(wl, POLICIES["flowcon"], SimConfig(alpha=0.5, interval_s=10)).run()
    assert [j.finish_s for j in base.jobs] != [j.finish_s for j in fc.jobs]


def test_oracle_is_a_lower_reference_for_average_completion():
    wl = workload(jobs=20, workers=2, spacing=3.0)
    orc = simulate_oracle(wl).summary()["avg_completion_s"]
    for p in ("default", "progress", "las"):
        got = Simulator(wl, POLICIES[p]).run().summary()["avg_completion_s"]
        assert orc <= got + 1e-6, p
