"""FlowCon (Algorithms 1 and 2): per-node elastic CPU limits from growth efficiency.

Limits are fractions of the node (1.0 = every CPU of the node). The lists are NL (new, growing
fast), WL (watching, slowing) and CL (completing, slow). Pure: the caller feeds each interval's
growth efficiencies and applies the limits it gets back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class FlowList(StrEnum):
    NEW = "NL"
    WATCHING = "WL"
    COMPLETING = "CL"


@dataclass(frozen=True, slots=True)
class FlowConParams:
    alpha: float = 0.05  # efficiency threshold (normalised progress per minute per core)
    itval_s: float = 30.0  # base interval
    beta: float = 2.0  # lower-bound factor: a CL limit is never below 1/(beta*n)
    max_itval_s: float = 480.0  # cap of the exponential back-off
    #: "whole": an NL container may use the whole node (unused CPU flows to it);
    #: "share": NL containers split the node by their efficiencies.
    new_limit: str = "whole"

    def __post_init__(self) -> None:
        if not self.alpha > 0:
            raise ValueError("alpha must be > 0")
        if not self.itval_s > 0 or self.max_itval_s < self.itval_s:
            raise ValueError("itval_s must be > 0 and max_itval_s >= itval_s")
        if not self.beta >= 1:
            raise ValueError("beta must be >= 1")
        if self.new_limit not in ("whole", "share"):
            raise ValueError("new_limit must be 'whole' or 'share'")


@dataclass(frozen=True, slots=True)
class FlowConState:
    lists: Mapping[str, FlowList] = field(default_factory=dict)
    limits: Mapping[str, float] = field(default_factory=dict)
    itval_s: float = 30.0

    def floor(self, params: FlowConParams) -> float:
        n = len(self.lists)
        return 1.0 if n == 0 else min(1.0, 1.0 / (params.beta * n))


def add_container(state: FlowConState, cid: str, params: FlowConParams) -> FlowConState:
    """Listener, arrival: the container joins NL with the whole node; the interval resets.

    The caller then runs :func:`step` at once (Algorithm 2's listener).
    """
    lists = dict(state.lists)
    limits = dict(state.limits)
    lists[cid] = FlowList.NEW
    limits[cid] = 1.0
    return FlowConState(lists=lists, limits=limits, itval_s=params.itval_s)


def remove_container(state: FlowConState, cid: str, params: FlowConParams) -> FlowConState:
    """Listener, departure: drop it, release its limit, reset the interval."""
    lists = {k: v for k, v in state.lists.items() if k != cid}
    limits = {k: v for k, v in state.limits.items() if k != cid}
    return FlowConState(lists=lists, limits=limits, itval_s=params.itval_s)


def _next_list(current: FlowList, g: float | None, alpha: float) -> FlowList:
    if g is None:
        return current
    if g >= alpha:
        return FlowList.NEW
    if current is FlowList.NEW:
        return FlowList.WATCHING
    return FlowList.COMPLETING


def step(
    state: FlowConState,
    efficiency: Mapping[str, float | None],
    params: FlowConParams,
    classify: bool = True,
) -> FlowConState:
    """One interval of Algorithm 1: move containers between lists and set their limits.

    ``efficiency`` maps each container on the node to its growth efficiency for the interval
    (None when it has no measurement yet: it keeps its list). Containers absent from the map
    keep their list too. ``classify=False`` only recomputes the limits from the given
    efficiencies (the listener's immediate run after an arrival or departure, which must not
    count as an interval).
    """
    if classify:
        lists = {
            cid: _next_list(cur, efficiency.get(cid), params.alpha)
            for cid, cur in state.lists.items()
        }
    else:
        lists = dict(state.lists)
    if not lists:
        return FlowConState(lists={}, limits={}, itval_s=params.itval_s)
    if all(lst is FlowList.COMPLETING for lst in lists.values()):
        # Everyone is slow: free competition, and back off exponentially.
        itval = min(state.itval_s * 2.0, params.max_itval_s) if classify else state.itval_s
        return FlowConState(lists=lists, limits={cid: 1.0 for cid in lists}, itval_s=itval)
    n = len(lists)
    floor = min(1.0, 1.0 / (params.beta * n))
    g = {cid: max(0.0, efficiency.get(cid) or 0.0) for cid in lists}
    total = sum(g.values())
    growing = [cid for cid, lst in lists.items() if lst is FlowList.NEW]
    total_growing = sum(g[cid] for cid in growing)
    limits: dict[str, float] = {}
    for cid, lst in lists.items():
        if lst is FlowList.COMPLETING:
            share = g[cid] / total if total > 0 else 0.0
            limits[cid] = min(1.0, max(floor, share))
        elif lst is FlowList.WATCHING:
            limits[cid] = max(floor, state.limits.get(cid, 1.0))
        elif params.new_limit == "share" and total_growing > 0 and efficiency.get(cid) is not None:
            limits[cid] = min(1.0, max(floor, g[cid] / total_growing))
        else:
            limits[cid] = 1.0
    return FlowConState(lists=lists, limits=limits, itval_s=params.itval_s)
