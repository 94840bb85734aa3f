"""FlowCon Algorithms 1 and 2: lists, limits, floor, back-off, listener."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specon.core import flowcon
from specon.core.flowcon import FlowConParams, FlowConState, FlowList

P = FlowConParams(alpha=0.1, itval_s=30, beta=2.0, max_itval_s=240)


def with_containers(*names: str) -> FlowConState:
    s = FlowConState(itval_s=P.itval_s)
    for n in names:
        s = flowcon.add_container(s, n, P)
    return s


def test_new_container_joins_nl_with_whole_node_and_resets_interval():
    s = FlowConState(itval_s=120)
    s = flowcon.add_container(s, "a", P)
    assert s.lists["a"] is FlowList.NEW and s.limits["a"] == 1.0 and s.itval_s == 30


def test_slow_growth_moves_nl_to_wl_to_cl_and_fast_goes_back_to_nl():
    s = with_containers("a", "b")
    s = flowcon.step(s, {"a": 0.01, "b": 1.0}, P)
    assert s.lists == {"a": FlowList.WATCHING, "b": FlowList.NEW}
    s = flowcon.step(s, {"a": 0.01, "b": 1.0}, P)
    assert s.lists["a"] is FlowList.COMPLETING
    s = flowcon.step(s, {"a": 0.5, "b": 1.0}, P)
    assert s.lists["a"] is FlowList.NEW


def test_cl_limit_is_its_share_of_growth_but_never_below_floor():
    s = with_containers("a", "b", "c", "d")
    eff = {"a": 0.05, "b": 0.06, "c": 3.0, "d": 5.0}
    s = flowcon.step(s, eff, P)
    s = flowcon.step(s, eff, P)
    assert s.lists["a"] is FlowList.COMPLETING and s.lists["b"] is FlowList.COMPLETING
    floor = 1 / (P.beta * 4)
    assert s.limits["a"] == pytest.approx(floor)  # 0.05/8.11 is below the floor
    assert s.limits["c"] == 1.0 and s.limits["d"] == 1.0  # NL: the whole node


def test_cl_limit_above_floor_is_share():
    s = with_containers("a", "b")
    eff = {"a": 0.09, "b": 0.2}
    s = flowcon.step(s, eff, P)
    s = flowcon.step(s, {"a": 0.09, "b": 0.11}, P)
    assert s.lists["a"] is FlowList.COMPLETING
    assert s.limits["a"] == pytest.approx(0.09 / 0.20)


def test_wl_keeps_its_limit():
    s = with_containers("a", "b")
    s = flowcon.FlowConState(lists=s.lists, limits={"a": 0.4, "b": 1.0}, itval_s=30)
    s = flowcon.step(s, {"a": 0.01, "b": 1.0}, P)
    assert s.lists["a"] is FlowList.WATCHING and s.limits["a"] == 0.4


def test_all_completing_frees_competition_and_backs_off_exponentially():
    s = with_containers("a", "b")
    slow = {"a": 0.01, "b": 0.02}
    s = flowcon.step(s, slow, P)
    s = flowcon.step(s, slow, P)
    assert s.limits == {"a": 1.0, "b": 1.0} and s.itval_s == 60
    s = flowcon.step(s, slow, P)
    assert s.itval_s == 120
    s = flowcon.step(s, slow, P)
    s = flowcon.step(s, slow, P)
    assert s.itval_s == 240  # capped


def test_departure_releases_limit_and_resets_interval():
    s = with_containers("a", "b")
    s = FlowConState(lists=s.lists, limits=s.limits, itval_s=240)
    s = flowcon.remove_container(s, "a", P)
    assert "a" not in s.lists and "a" not in s.limits and s.itval_s == 30


def test_listener_run_does_not_reclassify():
    s = with_containers("a", "b")
    s2 = flowcon.step(s, {"a": 0.0, "b": 0.0}, P, classify=False)
    assert s2.lists == s.lists


def test_unknown_growth_keeps_list():
    s = with_containers("a")
    s = flowcon.step(s, {"a": None}, P)
    assert s.lists["a"] is FlowList.NEW


def test_bad_params_are_refused():
    with pytest.raises(ValueError):
        FlowConParams(alpha=0)
    with pytest.raises(ValueError):
        FlowConParams(beta=0.5)


@given(
    st.lists(st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=8),
             min_size=1, max_size=12),
    st.floats(1.0, 8.0),
)
def test_limits_never_below_floor_nor_above_one(rounds, beta):
    params = FlowConParams(alpha=0.5, itval_s=30, beta=beta)
    n = max(len(r) for r in rounds)
    s = FlowConState(itval_s=30)
    for i in range(n):
        s = flowcon.add_container(s, f"c{i}", params)
    for r in rounds:
        eff = {f"c{i}": r[i] if i < len(r) else None for i in range(n)}
        s = flowcon.step(s, eff, params)
        floor = 1.0 / (beta * n)
        for lim in s.limits.values():
            assert floor - 1e-12 <= lim <= 1.0
        assert 30 <= s.itval_s <= params.max_itval_s
