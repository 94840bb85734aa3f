"""SpeCon Algorithm 4: scores, candidates, stay rule, load tie-break, extender priorities."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specon.core.categorize import Category
from specon.core.scoring import (
    Weights,
    WorkerView,
    choose_host,
    decide_reallocation,
    placement_scores,
)


def test_worked_example_from_the_research():
    # A converged job on Worker-4 with 5 other (progressing) jobs; 3, 2, 2 active jobs on 1-3.
    workers = [
        WorkerView("worker-1", progressing=3),
        WorkerView("worker-2", progressing=1, watching=1),
        WorkerView("worker-3", progressing=2),
        WorkerView("worker-4", progressing=5, converged=1),
    ]
    p = choose_host(workers, current_host="worker-4", category=Category.CONVERGED)
    assert [p.scores[w.name] for w in workers] == [6, 3.5, 4, 11]
    assert p.target == "worker-2" and not p.stay


def test_stays_when_host_is_a_candidate():
    workers = [WorkerView("a", progressing=1, converged=1), WorkerView("b", progressing=1)]
    p = choose_host(workers, current_host="a", category=Category.CONVERGED)
    assert p.stay and p.target == "a"


def test_ties_go_to_the_least_loaded():
    workers = [
        WorkerView("a", progressing=3, converged=1),
        WorkerView("b", progressing=1, load=0.9),
        WorkerView("c", progressing=1, load=0.2),
    ]
    p = choose_host(workers, current_host="a")
    assert p.candidates == ("b", "c") and p.target == "c"


def test_unknown_worker_is_never_chosen():
    workers = [WorkerView("a", progressing=4, converged=1), WorkerView("b", available=False)]
    p = choose_host(workers, current_host="a")
    assert p.stay


def test_new_job_placement_and_no_candidates():
    assert choose_host([WorkerView("a", 2), WorkerView("b", 1)]).target == "b"
    assert choose_host([WorkerView("a", available=False)]).target is None


def test_weights_must_be_ordered():
    with pytest.raises(ValueError):
        Weights(1.0, 1.5, 1.0)


def test_extender_priorities_prefer_low_scores():
    out = placement_scores([WorkerView("a", 4), WorkerView("b", 1), WorkerView("c", 0, 1),
                            WorkerView("d", available=False)])
    assert out["c"] > out["b"] > out["a"] and out["d"] == 0
    assert all(0 <= v <= 10 for v in out.values())


@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9),
                          st.floats(0, 1)), min_size=1, max_size=20))
def test_priorities_never_invert_specon_order(ws):
    views = [WorkerView(f"w{i}", p, w, c, load) for i, (p, w, c, load) in enumerate(ws)]
    out = placement_scores(views)
    weights = Weights()
    for a in views:
        for b in views:
            if a.score(weights) < b.score(weights):
                assert out[a.name] >= out[b.name]


def test_decide_reallocation_one_rule_for_the_simulator_and_the_manager() -> None:
    crowded = [WorkerView("a", 3, 0, 1), WorkerView("b", 0, 0, 0)]
    move = decide_reallocation(crowded, Weights(), "a", Category.CONVERGED)
    assert (move.decision, move.target, move.migrated) == ("migrate", "b", True)
    # a job that cannot move is judged best where it is, and marked: never asked again
    stay = decide_reallocation(crowded, Weights(), "a", Category.CONVERGED, movable=False)
    assert (stay.decision, stay.target, stay.migrated) == ("stay", "a", True)
    best = decide_reallocation([WorkerView("a", 0, 0, 1), WorkerView("b", 1, 0, 0)], Weights(),
                               "a", Category.CONVERGED)
    assert (best.decision, best.migrated) == ("stay", True)
