"""The node controller (specon.core.node) as the agent drives it: the listener at arrivals and
departures, FlowCon lists and limits from real-looking loss streams and CPU counters (in
nanoseconds), Algorithm 3's categories and its immediate reallocation request, and a job found
mid-run."""

from __future__ import annotations

import math

from specon.core.categorize import Category
from specon.core.flowcon import FlowConParams, FlowList
from specon.core.node import NodeController

PARAMS = FlowConParams(alpha=0.05, itval_s=10.0, beta=2.0)
CORE_NS = 1_000_000_000


def flat(value: float, n: int = 20) -> list[float]:
    return [value] * n


def falling(start: float, stop: float, n: int = 20) -> list[float]:
    return [start + (stop - start) * i / (n - 1) for i in range(n)]


def test_arrival_gets_the_whole_node_and_departure_recomputes_at_once() -> None:
    c = NodeController(PARAMS, alpha=0.05, per_second=CORE_NS)
    c.arrive("a", 0.0, 0)
    assert c.limits == {"a": 1.0} and c.dirty
    assert c.flow_due == 10.0
    c.arrive("b", 4.0, 0)
    assert c.limits == {"a": 1.0, "b": 1.0}
    assert c.flow_due == 10.0  # the listener never postpones a due interval
    assert c.depart("b", 5.0)
    assert c.limits == {"a": 1.0}
    assert not c.depart("b", 5.0)
    c.depart("a", 6.0)
    assert c.limits == {} and math.isinf(c.flow_due)


def run_interval(c: NodeController, t: float, losses: dict[str, list[float]],
                 cpu: dict[str, int]) -> tuple[str, ...]:
    for cid, values in losses.items():
        c.add_losses(cid, values)
    c.flow_tick(t, cpu)
    return c.categorize_tick(t, cpu)


def test_a_converged_job_falls_to_cl_at_the_floor_and_is_asked_to_move() -> None:
    c = NodeController(PARAMS, alpha=0.05, per_second=CORE_NS)
    for cid in ("old", "young1", "young2"):
        c.arrive(cid, 0.0, 0)
    cpu = dict.fromkeys(("old", "young1", "young2"), 0)
    # First interval: every job sets its first value.
    requests = run_interval(c, 10.0, {"old": falling(10, 2), "young1": falling(10, 9),
                                      "young2": falling(10, 9)}, cpu)
    assert requests == ()
    t, level = 10.0, 9.0
    asked: list[str] = []
    for k in range(6):
        t += 10.0
        level -= 1.0
        cpu = {k: v + int(0.6 * 10 * CORE_NS) for k, v in cpu.items()}
        # The old job still creeps down, less each interval (its growth keeps falling).
        old = flat(2.0 - 0.01 * (1 - 0.5**k))
        asked += run_interval(c, t, {"old": old, "young1": falling(level + 1, level),
                                     "young2": falling(level + 1, level)}, cpu)
    assert c.flow_list("old") is FlowList.COMPLETING
    assert c.limits["old"] == c.floor == 1 / 6  # 1/(beta*n): nothing shows progress for it
    assert c.limits["young1"] == c.limits["young2"] == 1.0
    assert c.jobs["old"].cat.category is Category.CONVERGED
    assert c.jobs["young1"].cat.category is Category.PROGRESSING
    assert "old" in asked and "young1" not in asked
    assert c.jobs["old"].cores == 0.6
    # Marked migrated (the manager decided): never asked again.
    c.mark_migrated("old")
    t += 10.0
    cpu = {k: v + 6 * CORE_NS for k, v in cpu.items()}
    assert "old" not in run_interval(c, t, {"old": flat(2.0), "young1": flat(1.0)}, cpu)


def test_no_cpu_counter_means_no_efficiency_not_an_infinite_one() -> None:
    c = NodeController(PARAMS, alpha=0.05, per_second=CORE_NS)
    c.arrive("a", 0.0, None)
    c.add_losses("a", falling(10, 5))
    c.flow_tick(10.0, {"a": None})
    c.add_losses("a", falling(5, 4))
    c.flow_tick(20.0, {"a": None})
    assert c.jobs["a"].efficiency is None
    assert c.flow_list("a") is FlowList.NEW


def test_a_job_found_mid_run_is_judged_against_its_whole_history() -> None:
    history = falling(10.0, 1.0, 90) + [1.0 + 0.01 * (i % 3) for i in range(100)]
    primed = NodeController(PARAMS, alpha=0.05, per_second=CORE_NS)
    primed.arrive("a", 0.0, 0)
    primed.prime("a", history)
    naive = NodeController(PARAMS, alpha=0.05, per_second=CORE_NS)
    naive.arrive("a", 0.0, 0)
    for c in (primed, naive):
        for k in range(1, 4):
            c.add_losses("a", flat(1.0 + 0.01 * (k % 2)))  # the plateau's noise
            c.flow_tick(10.0 * k, {"a": int(k * 10 * CORE_NS)})
    # Against the plateau's own noise every wiggle looks like progress; against the whole run
    # the plateau is what it is.
    assert primed.jobs["a"].efficiency is not None and naive.jobs["a"].efficiency is not None
    assert primed.jobs["a"].efficiency < 0.05 < naive.jobs["a"].efficiency
    assert primed.jobs["a"].loss == 1.01  # the last value logged


def test_parameters_from_the_manager_replace_the_local_ones() -> None:
    c = NodeController(PARAMS, alpha=0.05, per_second=CORE_NS)
    assert c.set_parameters(0.01, 0.02, 1.0)
    assert (c.alpha, c.params.alpha, c.params.beta) == (0.01, 0.02, 1.0)
    assert not c.set_parameters(0.01, 0.02, 1.0)


def test_a_job_whose_loss_stays_nan_is_watching_after_n_intervals() -> None:
    """Issue 32: a job whose loss stays NaN kept its last growth and stayed progressing."""
    from specon.defaults import NO_VALID_LOSS_INTERVALS as N

    c = NodeController(PARAMS, alpha=0.05, per_second=CORE_NS)
    for cid in ("nan", "ok"):
        c.arrive(cid, 0.0, 0)
    t = 0.0
    for k in range(3):  # both fall steadily: progressing, with a growth
        t += 60.0
        c.add_losses("nan", falling(10.0 - k, 9.0 - k))
        c.add_losses("ok", falling(10.0 - k, 9.0 - k))
        c.categorize_tick(t, {"nan": int(t * CORE_NS), "ok": int(t * CORE_NS)})
    assert c.jobs["nan"].cat.category is Category.PROGRESSING
    assert c.jobs["nan"].growth is not None
    for k in range(N):
        t += 60.0
        c.add_losses("nan", [math.nan] * 20)
        c.add_losses("ok", falling(7.0 - k, 6.0 - k))
        c.categorize_tick(t, {"nan": int(t * CORE_NS), "ok": int(t * CORE_NS)})
        want = Category.WATCHING if k == N - 1 else Category.PROGRESSING
        assert c.jobs["nan"].cat.category is want, k
    assert c.jobs["nan"].growth is None  # no stale growth reported
    assert c.jobs["ok"].cat.category is Category.PROGRESSING
