"""A new policy is its rules plus a registration: this file adds two and touches nothing else.
The first is a simulator-only share rule; the second is a node share rule of the core, which
the simulator and the agent's node controller both run, looked up by the policy's name in
specon.core.policy as the CLI, the agent and the manager look theirs up."""

from collections.abc import Iterator, Sequence

import pytest
from synth import workload

from specon.core.categorize import Category
from specon.core.flowcon import FlowConParams
from specon.core.job_loads import measured_load
from specon.core.node import NODE_SHARES, NodeController, register_share
from specon.core.policy import POLICIES, Policy, lookup, register
from specon.core.progress import JobLoad
from specon.core.scoring import Weights
from specon.core.shares import by_priority
from specon.sim import engine
from specon.sim.model import SimConfig
from specon_agent.loop_config import agent_policy


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


@pytest.fixture
def longest_first() -> Iterator[str]:
    @register_share("toy-longest")
    def longest(cpus: float, jobs: Sequence[JobLoad], weights: Weights,
                fair: float) -> dict[str, float]:
        """Everything to the job with the most work left (the opposite of the shipped rule),
        a twentieth of a core to each other job."""
        top = max(jobs, key=lambda j: (j.work, j.name))
        return {j.name: cpus - 0.05 * (len(jobs) - 1) if j is top else 0.05 for j in jobs}

    register(Policy("toy-longest", share="toy-longest", description="longest work first"))
    yield "toy-longest"
    NODE_SHARES.pop("toy-longest")
    POLICIES.pop("toy-longest")


def test_a_toy_node_rule_runs_in_the_simulator_and_in_the_agents_node_controller(
        longest_first: str) -> None:
    policy = lookup(longest_first)
    wl = workload(jobs=6, workers=1, spacing=1.0, cores=1)
    toy = engine.Simulator(wl, policy, SimConfig()).run()
    shipped = engine.Simulator(wl, lookup("progress"), SimConfig()).run()
    avg = {r.policy: r.summary()["avg_completion_s"] for r in (toy, shipped)}
    assert avg["toy-longest"] > avg["progress"], avg  # longest first is worse
    # the agent accepts it by name and its node controller runs the same rule
    assert agent_policy(longest_first).share == "toy-longest"
    ctl = NodeController(FlowConParams(), alpha=0.01)
    for cid in ("a", "b"):
        ctl.arrive(cid, 0.0, 0.0)
    loads = [measured_load("a", 10, 100, 10.0, 2), measured_load("b", 10, 1000, 10.0, 2)]
    ctl.divide(policy.share, 2.0, loads, Weights())
    assert ctl.limits == {"a": 0.025, "b": 0.975}
    assert loads[0].category is Category.PROGRESSING
