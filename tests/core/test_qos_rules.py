"""Quality targets and deadlines in the manager's decisions (specon.core.qos_rules)."""

from __future__ import annotations

import itertools
import math
import random

from specon.core.qos_rules import (
    AT_RISK_PENALTY,
    NodeQos,
    migration_hold,
    qos_placement_scores,
    qos_value,
)
from specon.core.rebalance import Move, PlacedJob, plan_rebalance


# -- placement --------------------------------------------------------------------------------
def test_more_free_cpu_scores_higher() -> None:
    s = qos_placement_scores([NodeQos("a", 1.0), NodeQos("b", 3.0), NodeQos("c", 2.0)])
    assert s == {"b": 10, "c": 5, "a": 1}


def test_an_at_risk_job_outweighs_any_amount_of_free_cpu() -> None:
    s = qos_placement_scores([NodeQos("busy", 0.0), NodeQos("risky", 64.0, at_risk=1)])
    assert s["busy"] > s["risky"] >= 1


def test_fewer_at_risk_jobs_win_and_free_cpu_decides_among_equals() -> None:
    nodes = [NodeQos("r2", 8.0, 2), NodeQos("r1-free", 8.0, 1), NodeQos("r1-full", 1.0, 1),
             NodeQos("ok", 0.5, 0)]
    s = qos_placement_scores(nodes)
    assert s["ok"] > s["r1-free"] > s["r1-full"] > s["r2"]
    assert s["ok"] == 10 and s["r2"] == 1


def test_unknown_nodes_get_zero_and_equal_nodes_the_top_score() -> None:
    s = qos_placement_scores([NodeQos("a", 2.0), NodeQos("b", 2.0),
                              NodeQos("gone", 100.0, available=False)])
    assert s == {"a": 10, "b": 10, "gone": 0}
    assert qos_placement_scores([NodeQos("x", available=False)]) == {"x": 0}
    assert qos_placement_scores([]) == {}


def test_no_free_cpu_anywhere_is_decided_by_at_risk_jobs_alone() -> None:
    s = qos_placement_scores([NodeQos("a", 0.0, 1), NodeQos("b", -3.0, 0)])  # load > capacity
    assert s == {"a": 1, "b": 10}
    assert qos_value(NodeQos("b", -3.0), 0.0) == 0.0


def test_the_ranking_is_at_risk_first_then_free_cpu() -> None:
    rng = random.Random(7)
    for _ in range(200):
        nodes = [NodeQos(f"n{i}", rng.choice([0.0, 0.5, 1.0, 2.5, 4.0, 16.0]),
                         rng.choice([0, 0, 1, 2])) for i in range(rng.randint(1, 6))]
        s = qos_placement_scores(nodes)
        for a, b in itertools.permutations(nodes, 2):
            if (a.at_risk, -a.free_cpus) < (b.at_risk, -b.free_cpus):
                assert s[a.name] >= s[b.name], (nodes, s)
            assert 1 <= s[a.name] <= 10
    assert AT_RISK_PENALTY > 1


# -- staying -------------------------------------------------------------------------------------
def test_at_risk_jobs_and_jobs_short_of_slack_stay() -> None:
    assert "at risk" in (migration_hold("at-risk", 10_000.0, 120) or "")
    assert "at risk" in (migration_hold("at-risk", None, 120) or "")
    why = migration_hold("on-track", 60.0, 120)
    assert why is not None and "60 s" in why and "120 s" in why
    assert migration_hold("given-up", -300.0, 120) is not None  # late already: no move
    assert migration_hold("on-track", 600.0, 120) is None
    assert migration_hold("on-track", 120.0, 120) is None  # exactly enough
    assert migration_hold("reached", None, 120) is None


def test_jobs_without_qos_are_never_held() -> None:
    assert migration_hold("none", None, 120) is None


# -- choosing whom to rebalance ----------------------------------------------------------------
def _jobs() -> list[PlacedJob]:
    # w0 holds three converged jobs, w1 one, w2 is idle; bf = floor(4 / 3) = 1
    return [PlacedJob("a", "w0", 100.0), PlacedJob("b", "w0", 200.0),
            PlacedJob("c", "w0", 150.0), PlacedJob("d", "w1", 50.0)]


def test_without_slack_it_is_algorithm_5_itself() -> None:
    w = ["w0", "w1", "w2"]
    assert plan_rebalance(_jobs(), w, 300.0, slack={}) == plan_rebalance(_jobs(), w, 300.0)
    # the most recently converged job (b) moves
    assert plan_rebalance(_jobs(), w, 300.0, slack={}) == (Move("b", "w0", "w2"),)


def test_the_job_with_the_most_slack_moves_first() -> None:
    w = ["w0", "w1", "w2"]
    moves = plan_rebalance(_jobs(), w, 300.0, slack={"a": 5000.0, "b": 300.0})
    # c has no deadline (infinite slack): it goes before a (5000 s) and b (300 s)
    assert moves == (Move("c", "w0", "w2"),)
    moves = plan_rebalance(_jobs(), w, 300.0, slack={"a": 5000.0, "b": 300.0, "c": 400.0})
    assert moves == (Move("a", "w0", "w2"),)


def test_equal_slack_falls_back_to_algorithm_5s_order() -> None:
    w = ["w0", "w1", "w2"]
    moves = plan_rebalance(_jobs(), w, 300.0, slack={"a": 900.0, "b": 900.0, "c": 900.0})
    assert moves == (Move("b", "w0", "w2"),)


def test_slack_never_changes_the_rules_of_algorithm_5() -> None:
    w = ["w0", "w1", "w2"]
    # a job not yet converged: no round at all
    jobs = [*_jobs(), PlacedJob("e", "w1", None)]
    assert plan_rebalance(jobs, w, 300.0, slack={"a": 1.0}) == ()
    # immovable and already rebalanced jobs stay whatever their slack
    jobs = [PlacedJob("a", "w0", 100.0, movable=False), PlacedJob("b", "w0", 200.0,
            rebalanced=True), PlacedJob("c", "w0", 150.0), PlacedJob("d", "w1", 50.0)]
    assert plan_rebalance(jobs, w, 300.0, slack={"c": 1.0}) == (Move("c", "w0", "w2"),)
    # the same as Algorithm 5 written out with the slack first in its pick
    rng = random.Random(3)
    for _ in range(300):
        n = rng.randint(1, 8)
        jobs = [PlacedJob(f"j{i}", f"w{rng.randint(0, 2)}", float(rng.randint(0, 99)),
                          rebalanced=rng.random() < 0.2, movable=rng.random() < 0.8)
                for i in range(n)]
        slack = {j.name: float(rng.randint(-100, 5000)) for j in jobs if rng.random() < 0.6}
        assert plan_rebalance(jobs, w, 100.0, slack=slack) == _reference(jobs, slack, w,
                                                                             100.0)


def _reference(jobs: list[PlacedJob], slack: dict[str, float], workers: list[str],
               now: float) -> tuple[Move, ...]:
    """specon.core.rebalance.plan_rebalance, its pick keyed by slack first."""
    load = {w: sum(1 for j in jobs if j.worker == w) for w in workers}
    bf = max(1, sum(load.values()) // len(workers))
    idle = [w for w in workers if load[w] == 0]
    targets = [w for w in idle if load[w] < bf] if idle else [
        w for w in workers if load[w] < bf - 1]
    moves: list[Move] = []
    for target in sorted(targets, key=lambda w: (load[w], w)):
        pool = [j for j in jobs if j.worker != target and j.movable and not j.rebalanced
                and j.name not in {m.job for m in moves} and load[j.worker] > bf]
        if pool:
            pick = min(pool, key=lambda j: (-slack.get(j.name, math.inf),
                                            now - (now if j.migrated_at is None else j.migrated_at),
                                            j.name))
            moves.append(Move(pick.name, pick.worker, target))
            load[pick.worker] -= 1
            load[target] += 1
    return tuple(moves)
