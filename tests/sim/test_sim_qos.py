"""Quality targets and deadlines in the simulator: stop at target, the dqoes and deadline
policies, and the node agent's rule (agent-qos)."""

from pathlib import Path

import pytest
from synth import profile, workload

from specon.core.policy import POLICIES
from specon.sim.engine import Simulator
from specon.sim.experiments import EXPERIMENTS
from specon.sim.model import RunResult, SimConfig
from specon.sim.runner import run_matrix
from specon.workload import Workload
from specon.workload.load import parse_workload


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


def _late_deadline_beside_long_jobs() -> Workload:
    """One worker: D takes about 80 s at an equal share and states a deadline of 5 s (late
    even at full speed); three long jobs state a day."""
    data = {
        "format": "specon-workload/v1",
        "cluster": {"workers": [{"name": "w1", "cpus": 2.0}]},
        "profiles": {"d": profile("d", iterations=300), "long": profile("long", iterations=3000)},
        "jobs": [{"name": f"long-{i}", "profile": "long", "submit_s": 0.0, "deadline_s": 86400.0}
                 for i in range(3)]
        + [{"name": "d", "profile": "d", "submit_s": 1.0, "deadline_s": 5.0}],
    }
    return parse_workload(data, Path("late-deadline.json"))


def test_a_missed_completion_deadline_costs_no_more_than_plain_sharing():
    """With nobody put first, a job late even at full speed keeps an equal share: held at the
    floor, it once took 4x its default time on the real engine (tests/docker/
    test_agent_deadline.py under load), and here 7.6x (606 s against 80 s)."""
    cfg = SimConfig(record_timeline=False, interval_s=5.0)  # judged often, as the agent does
    default = Simulator(_late_deadline_beside_long_jobs(), POLICIES["default"], cfg).run()
    qos = Simulator(_late_deadline_beside_long_jobs(), POLICIES["agent-qos"], cfg).run()

    def d(res: RunResult) -> float:
        return next(j.completion_s for j in res.jobs if j.name == "d")

    assert not next(j for j in qos.jobs if j.name == "d").met_deadline
    assert d(qos) <= 1.1 * d(default), (d(qos), d(default))



def test_the_qos_limits_beside_the_shipped_node_rule_keep_its_gain():
    """The agent's QoS limits override the node rule's shares (SimConfig.qos_over_shares).
    While jobs past saving and reached targets were held at the floor with nobody put first,
    that made `targets-short` +36.9% average completion against default (10 seeds; -26.5%
    now, docs/results.md)."""
    exp = EXPERIMENTS["targets-short"]
    cfg = SimConfig(record_timeline=False, qos_over_shares=True)
    mx = run_matrix("targets-short", exp.build, ["default", "progress"], [0, 1], cfg)
    assert mx.metric("progress", "avg_completion_s").mean < \
        0.9 * mx.metric("default", "avg_completion_s").mean
    assert mx.metric("progress", "targets_met").mean > mx.metric("default", "targets_met").mean
