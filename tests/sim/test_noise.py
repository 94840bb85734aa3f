"""Noisy logs reach what the policies see, never what the metrics count (specon.sim.noise)."""

import itertools
import random
from dataclasses import asdict

import pytest

from specon.core.policy import POLICIES
from specon.sim.engine import Simulator
from specon.sim.experiments import shipped_profiles
from specon.sim.generate import Shape, random_workload
from specon.sim.milestones import ninety_iteration
from specon.sim.model import SimConfig
from specon.sim.noise import noisy_log
from specon.sim.runner import run_one

NOISY = {"loss_noise": 0.1, "loss_spikes": 0.02, "loss_bump": 0.1}  # the suite's `standard`
SMALL = Shape(workers=(2, 3), cpus=(2, 8), jobs=(6, 10), minutes=(10.0, 30.0), load=(1.0, 3.0))


def jobs_of(res):
    return [asdict(j) for j in sorted(res.jobs, key=lambda j: j.name)]


def test_a_noisy_log_is_reproducible_noisy_and_not_monotone():
    loss = shipped_profiles()["mlp-digits"].loss
    a = noisy_log(loss, random.Random("s"), noise=0.1, spikes=0.02, bump=0.1)
    b = noisy_log(loss, random.Random("s"), 0.1, 0.02, 0.1)
    assert a == b and len(a) == len(loss) and a != tuple(loss)
    noise = noisy_log(loss, random.Random("s"), noise=0.1)
    ratios = sorted(x / y for x, y in zip(noise, loss, strict=True))
    assert ratios[len(ratios) // 2] == pytest.approx(1.0, abs=0.05)
    assert 0.05 < ratios[-len(ratios) // 6] - 1.0 < 0.2  # about one sigma above
    assert noisy_log(loss, random.Random("s")) == tuple(loss)  # no settings: the log itself


def test_the_bump_makes_a_falling_loss_rise_for_a_while():
    loss = [1.0 - k / 100 for k in range(100)]
    seen = noisy_log(loss, random.Random(1), bump=0.3)
    rises = sum(1 for x, y in itertools.pairwise(seen) if y > x)
    assert rises >= 5
    # it rises in the middle: both ends stay near the log's own
    assert seen[0] == pytest.approx(1.0, abs=0.02) and seen[-1] == pytest.approx(0.01, abs=1e-3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noise_leaves_the_default_schedulers_run_and_every_metric_as_it_was(seed):
    # default never reads the loss: with the same workload and seed, every job's start,
    # finish, time to 90% and target reached are the same, so the metrics count the true loss
    wl = random_workload(700 + seed, SMALL)
    plain = run_one(wl, "default", SimConfig(record_timeline=False), seed)
    noisy = run_one(wl, "default", SimConfig(record_timeline=False, **NOISY), seed)
    assert jobs_of(noisy) == jobs_of(plain)
    assert noisy.summary() == plain.summary()


def test_the_policies_read_the_noisy_log():
    wl = random_workload(700, SMALL)
    sim = Simulator(wl, POLICIES["flowcon"], SimConfig(record_timeline=False, **NOISY), seed=0)
    for job in sim.jobs.values():
        assert tuple(job.observed) != tuple(job.profile.loss)
    # a policy that reads the loss (FlowCon's growth) schedules differently on the same seed
    differs = 0
    for seed in range(3):
        plain = run_one(wl, "flowcon", SimConfig(record_timeline=False), seed)
        noisy = run_one(wl, "flowcon", SimConfig(record_timeline=False, **NOISY), seed)
        differs += jobs_of(plain) != jobs_of(noisy)
    assert differs


def test_the_90_percent_milestone_comes_from_the_profile_not_the_noisy_log():
    wl = random_workload(701, SMALL)
    cfg = SimConfig(record_timeline=False, loss_noise=0.5, loss_bump=1.0)
    sim = Simulator(wl, POLICIES["progress"], cfg, seed=0)
    for job in sim.jobs.values():
        assert (ninety_iteration(job.profile), "90") in job.milestones


@pytest.mark.parametrize("bad", [{"loss_noise": -0.1}, {"loss_spikes": 1.5},
                                 {"loss_bump": float("inf")}, {"cost_error": 1.0},
                                 {"unknown_total_share": 2.0}])
def test_the_config_refuses_impossible_noise(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SimConfig(**bad)


def test_a_job_that_declares_no_total_is_guessed_at_as_the_agent_guesses_it():
    """Without a declared total the policy sees what an agent reports
    (specon.core.job_loads.steps_left): as much again as the job has done, nothing at its
    start, and never anything of the total it does not declare (until 2026-11-29 the
    simulator took at least a tenth of the true total, which flattered every noisy row)."""
    from specon.sim.engine import inputs

    wl = random_workload(700, SMALL)
    sim = Simulator(wl, POLICIES["progress"],
                    SimConfig(record_timeline=False, unknown_total_share=1.0), seed=0)
    w = next(iter(sim.workers.values()))
    for job in sim.jobs.values():
        assert not job.total_known
        for done in (0.0, 7.0, 0.5 * job.profile.iterations):
            job.done = done
            assert inputs.work_left(job) == pytest.approx(done * job.cost_seen)
            assert inputs.load(sim, job, w).guessed
