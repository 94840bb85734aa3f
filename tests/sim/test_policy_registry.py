"""A new simulator policy is its rules plus a registration: this file adds one and touches
nothing else."""

import pytest
from synth import workload

from specon.core.shares import by_priority
from specon.sim import engine
from specon.sim.model import Policy, SimConfig


@pytest.fixture
def fifo():
    @engine.register_share("toy-fifo", ticked=False)
    def first_come(sim, w, jobs, caps):
        """Strict priority by arrival: the oldest job on the worker gets what it can use."""
        order = sorted(range(len(jobs)), key=lambda i: jobs[i].spec.submit_s)
        levels = [order.index(i) for i in range(len(jobs))]
        return by_priority(w.cpus, caps, levels)

    yield Policy("toy-fifo", share="toy-fifo", description="first come, first served")
    engine.SHARE_RULES.pop("toy-fifo")


def test_a_toy_policy_runs_from_its_registration_alone(fifo):
    wl = workload(jobs=6, workers=1, spacing=1.0, cores=1)
    toy = engine.Simulator(wl, fifo, SimConfig()).run()
    equal = engine.Simulator(wl, Policy("equal-shares"), SimConfig()).run()
    finish = {j.name: j.finish_s for j in toy.jobs}
    ordered = sorted(finish, key=lambda n: int(n.split("-")[1]))
    # on 2 CPUs, first come first served ends the first two jobs before any later one starts
    assert finish[ordered[0]] < finish[ordered[2]] and finish[ordered[1]] < finish[ordered[3]]
    assert [j.finish_s for j in toy.jobs] != [j.finish_s for j in equal.jobs]


def test_an_unknown_rule_is_named():
    with pytest.raises(ValueError, match="unknown share rule 'nope'"):
        engine.Simulator(workload(jobs=1, workers=1), Policy("x", share="nope"))
