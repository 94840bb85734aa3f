"""The simulator's node model: threads, CPU limits, interference, worker size and speed
(docs/node-model.md; issue findings 3, 4, 6 and 7)."""

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specon.core.policy import POLICIES
from specon.core.speedup import OVERSUBSCRIPTION_PENALTY, Curve, interference, thread_speed
from specon.sim.engine import Simulator
from specon.sim.experiments import EXPERIMENTS, SINGLE_THREADED
from specon.sim.model import SimConfig
from specon.workload.load import parse_workload

TABLE = {"1": 1.0, "2": 1.46, "4": 2.71, "8": 5.24}


def wl(workers, jobs, speedup=None):
    data = {
        "format": "specon-workload/v1", "cluster": {"workers": workers},
        "profiles": {"p": {"name": "p", "iterations": 100, "loss": [1, 0.5, 0.3, 0.2],
                           "cpu_seconds_per_iteration": 1.0, "speedup": speedup or TABLE,
                           "checkpoint_seconds": 1, "restore_seconds": 1,
                           "checkpoint_bytes": 1000}},
        "jobs": jobs,
    }
    return parse_workload(data, Path("node.json"))


def completion(workload, policy="default", **cfg):
    res = Simulator(workload, POLICIES[policy], SimConfig(**cfg)).run()
    return {j.name: j.completion_s for j in res.jobs}


def test_a_job_runs_the_threads_it_sees_by_default():
    # finding 3: the default was the table's largest key (8) even on a 4-CPU worker
    got = completion(wl([{"name": "w", "cpus": 4}], [{"name": "a", "profile": "p",
                                                       "submit_s": 0}]))
    assert got["a"] == pytest.approx(100 / 2.71)


def test_a_job_told_its_threads_runs_that_many():
    got = completion(wl([{"name": "w", "cpus": 8}], [{"name": "a", "profile": "p",
                                                       "submit_s": 0, "cores": 2}]))
    assert got["a"] == pytest.approx(100 / 1.46)


def test_threads_squeezed_onto_fewer_cores_cost_throughput():
    # finding 3: two 2-thread jobs sharing 2 cores ran at speed-up(1) as if the extra
    # thread were free; now each pays the oversubscription penalty
    jobs = [{"name": n, "profile": "p", "submit_s": 0, "cores": 2} for n in ("a", "b")]
    got = completion(wl([{"name": "w", "cpus": 2}], jobs), interference=0.0)
    expected = 100 / (1.0 * (1 - OVERSUBSCRIPTION_PENALTY * 0.5))
    assert got["a"] == pytest.approx(expected) and got["b"] == pytest.approx(expected)


def test_co_located_jobs_interfere():
    jobs = [{"name": n, "profile": "p", "submit_s": 0, "cores": 1} for n in ("a", "b")]
    got = completion(wl([{"name": "w", "cpus": 2}], jobs), interference=0.1)
    assert got["a"] == pytest.approx(100 / 0.9)


def test_worker_speed_scales_a_job():
    jobs = [{"name": "a", "profile": "p", "submit_s": 0, "cores": 1}]
    assert completion(wl([{"name": "w", "cpus": 1, "speed": 2.0}], jobs))["a"] == \
        pytest.approx(50.0)


@given(st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 6, 8, 16]),
                          st.floats(0.1, 20)), min_size=1, max_size=5, unique_by=lambda p: p[0]),
       st.floats(1, 32), st.floats(0.01, 32), st.floats(0.01, 32))
def test_a_cpu_limit_never_speeds_a_job_up(points, threads, c1, c2):
    # finding 3: with speed-up(c) for c < threads a limit could make a job faster
    curve = Curve.of([(float(k), v) for k, v in points])
    lo, hi = sorted((c1, c2))
    assert thread_speed(curve, threads, lo) <= thread_speed(curve, threads, hi) + 1e-12
    assert thread_speed(curve, threads, lo) <= curve.at(min(threads, curve.max_cores)) + 1e-12


@given(st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 6, 8, 16]),
                          st.floats(0.1, 20)), min_size=1, max_size=5, unique_by=lambda p: p[0]),
       st.floats(0, 40))
def test_the_hull_lies_on_or_above_every_speed(points, cores):
    curve = Curve.of([(float(k), v) for k, v in points])
    hull = curve.hull()
    xs = [p[0] for p in hull]

    def h(u: float) -> float:
        if u >= xs[-1]:
            return hull[-1][1]
        for (x0, y0), (x1, y1) in itertools.pairwise(hull):
            if x0 <= u <= x1:
                return y0 + (y1 - y0) * (u - x0) / (x1 - x0)
        raise AssertionError
    assert curve.envelope(cores) <= h(cores) + 1e-9


def test_interference_grows_with_the_other_jobs_use():
    assert interference(4, 1, 0) == 1.0
    assert interference(4, 1, 3) == pytest.approx(0.9)
    assert interference(4, 1, 1.5) == pytest.approx(0.95)
    assert interference(1, 1, 0.5) == 1.0  # no other core to share


def test_research_placement_follows_worker_capacity():
    # finding 4: a 16/2/2/4-CPU cluster got 12/12/12/11 jobs (counts, not capacity)
    cluster = [{"name": "w16", "cpus": 16}, {"name": "w2a", "cpus": 2},
               {"name": "w2b", "cpus": 2}, {"name": "w4", "cpus": 4}]
    jobs = [{"name": f"j{i:02d}", "profile": "p", "submit_s": i * 0.1, "cores": 1}
            for i in range(24)]
    res = Simulator(wl(cluster, jobs), POLICIES["paper-specon"]).run()
    got = {w["name"]: 0 for w in cluster}
    for j in res.jobs:
        got[j.first_worker] += 1
    assert got["w16"] >= 3 * max(got["w2a"], got["w2b"]) and got["w16"] > 2 * got["w4"], got


@pytest.mark.parametrize("name", ["paper-30", "paper-20", "paper-vae20", "paper-50x8",
                                  "philly-160", "targets-short", "deadlines-short"])
def test_the_single_threaded_experiments_are_single_threaded(name):
    # finding 7: birnn-digits and dynrnn-synthetic ran 2 threads in the built-ins
    workload = EXPERIMENTS[name].build(0)
    assert all(j.cores == 1 for j in workload.jobs)
    assert {j.profile for j in workload.jobs} <= set(SINGLE_THREADED)
    assert all(w.cpus == 2 for w in workload.cluster.workers)


def test_the_multicore_experiments_use_multicore_jobs():
    workload = EXPERIMENTS["paper-30-mc"].build(0)
    assert all(j.cores is None for j in workload.jobs)
    assert all(w.cpus == 16 for w in workload.cluster.workers)
    assert any(max(workload.profiles[j.profile].speedup.values()) > 4 for j in workload.jobs)


def test_seeds_over_a_fixed_workload_file_are_said_to_vary_only_tie_breaks(tmp_path):
    # finding 6: intervals over seeds on one file measured only default's tie-break noise
    path = tmp_path / "wl.json"
    data = json.loads(wl([{"name": "w", "cpus": 2}, {"name": "v", "cpus": 2}],
                         [{"name": "a", "profile": "p", "submit_s": 0}]).model_dump_json())
    path.write_text(json.dumps(data))
    r = subprocess.run([sys.executable, "-m", "specon", "simulate", str(path), "--seeds", "3",
                        "--policies", "default,las", "--no-plots", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "the same workload for every seed" in r.stdout.replace("\n", " ")
    one = subprocess.run([sys.executable, "-m", "specon", "simulate", str(path), "--seeds", "1",
                          "--policies", "default", "--no-plots", "--out", str(tmp_path / "p")],
                         capture_output=True, text=True, timeout=300)
    assert "the same workload for every seed" not in one.stdout.replace("\n", " ")
