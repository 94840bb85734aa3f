"""Quality targets and deadlines in the simulator: stop at target, the dqoes and deadline
policies, and the node agent's rule (agent-qos)."""

import pytest
from synth import workload

from specon.core.policy import POLICIES
from specon.sim.engine import Simulator
from specon.sim.experiments import EXPERIMENTS
from specon.sim.model import SimConfig
from specon.sim.runner import run_matrix


def test_a_job_that_stops_at_its_target_ends_when_it_reaches_it():
    wl = workload(jobs=1, workers=1, target_loss=1.0, stop_at_target=True)
    res = Simulator(wl, POLICIES["default"]).run()
    job = res.jobs[0]
    assert job.target_reached_s is not None and job.finish_s == pytest.approx(job.target_reached_s)
    full = Simulator(workload(jobs=1, workers=1), POLICIES["default"]).run().jobs[0]
    assert job.finish_s < full.finish_s


def test_target_met_counts_only_within_the_budget():
    wl = workload(jobs=6, workers=1, spacing=1.0, target_loss=0.5, deadline_s=1.0)
    res = Simulator(wl, POLICIES["default"]).run()
    assert res.summary()["targets"] == 6 and res.summary()["targets_met"] == 0


@pytest.mark.parametrize(("experiment", "policy", "metric"),
                         [("targets-short", "dqoes", "targets_met"),
                          ("deadlines-short", "deadline", "deadlines_met"),
                          ("targets-short", "agent-qos", "targets_met"),
                          ("deadlines-short", "agent-qos", "deadlines_met")])
def test_qos_policies_meet_more_than_default_and_the_research_system(experiment, policy,
                                                                    metric):
    exp = EXPERIMENTS[experiment]
    mx = run_matrix(experiment, exp.build, ["default", "paper", "progress", policy],
                    [0, 1, 2], SimConfig(record_timeline=False))
    mine = mx.metric(policy, metric).mean
    assert mine > mx.metric("default", metric).mean
    assert mine > mx.metric("paper", metric).mean
    # the shipped system, which serves the least work left first, meets more than default too
    assert mx.metric("progress", metric).mean > mx.metric("default", metric).mean
