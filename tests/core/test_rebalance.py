"""SpeCon Algorithm 5: converged duration, balance factor, both branches."""

from hypothesis import given
from hypothesis import strategies as st

from specon.core.rebalance import Move, PlacedJob, balance_factor, plan_rebalance


def test_balance_factor():
    assert balance_factor(9, 4) == 2
    assert balance_factor(3, 4) == 1  # floored at 1 so a small tail is still spread
    assert balance_factor(3, 4, min_balance=0) == 0


def test_nothing_moves_until_every_job_is_marked():
    jobs = [PlacedJob("a", "w1", 10.0), PlacedJob("b", "w1", None)]
    assert plan_rebalance(jobs, ["w1", "w2"], now=100) == ()


def test_idle_worker_gets_the_most_recently_converged_job():
    jobs = [
        PlacedJob("a", "w1", 10.0), PlacedJob("b", "w1", 50.0), PlacedJob("c", "w1", 30.0),
        PlacedJob("d", "w2", 5.0),
    ]
    # 4 jobs, 3 workers: bf = 1; w3 is idle; smallest d = now - 50 -> job b
    assert plan_rebalance(jobs, ["w1", "w2", "w3"], now=100) == (Move("b", "w1", "w3"),)


def test_no_idle_branch_fills_workers_below_bf_minus_one():
    jobs = [PlacedJob(f"a{i}", "w1", float(i)) for i in range(6)]
    jobs += [PlacedJob("b", "w2", 1.0), PlacedJob("c", "w3", 1.0)]
    jobs += [PlacedJob(f"d{i}", "w4", 1.0) for i in range(4)]
    # 12 jobs / 4 workers: bf = 3; w2 and w3 hold 1 < bf-1 = 2: each takes one from w1 (6 > 3)
    moves = plan_rebalance(jobs, ["w1", "w2", "w3", "w4"], now=10)
    assert moves == (Move("a5", "w1", "w2"), Move("a4", "w1", "w3"))


def test_rebalanced_or_unmovable_jobs_are_not_moved():
    jobs = [
        PlacedJob("a", "w1", 1.0, rebalanced=True), PlacedJob("b", "w1", 2.0, movable=False),
        PlacedJob("c", "w1", 0.5),
    ]
    assert plan_rebalance(jobs, ["w1", "w2"], now=10) == (Move("c", "w1", "w2"),)


@given(st.lists(st.tuples(st.integers(0, 5), st.floats(0, 100), st.booleans()),
                min_size=1, max_size=30), st.integers(1, 6))
def test_never_onto_own_host_never_twice_never_empties_a_source(spec, n_workers):
    workers = [f"w{i}" for i in range(n_workers)]
    jobs = [PlacedJob(f"j{i}", workers[w % n_workers], t, rebalanced=r)
            for i, (w, t, r) in enumerate(spec)]
    moves = plan_rebalance(jobs, workers, now=200)
    by_name = {j.name: j for j in jobs}
    assert len({m.job for m in moves}) == len(moves)
    for m in moves:
        assert m.source != m.target
        assert by_name[m.job].worker == m.source
        assert not by_name[m.job].rebalanced
    after = {w: sum(1 for j in jobs if j.worker == w) for w in workers}
    for m in moves:
        after[m.source] -= 1
        after[m.target] += 1
    assert all(v >= 0 for v in after.values())
    assert all(v >= 1 for w, v in after.items() if any(m.source == w for m in moves))
