"""Pure decision code: growth, FlowCon limits, SpeCon categories, scoring and rebalancing.

No I/O, no clock reads, no globals: state in, decisions out.
"""

from specon.core.categorize import CategorizeResult, Category, JobState, categorize, counts
from specon.core.flowcon import FlowConParams, FlowConState, FlowList
from specon.core.growth import Growth, LossTrack, interval_value
from specon.core.rebalance import Move, PlacedJob, balance_factor, plan_rebalance
from specon.core.scoring import Placement, Weights, WorkerView, choose_host, placement_scores

__all__ = [
    "CategorizeResult",
    "Category",
    "FlowConParams",
    "FlowConState",
    "FlowList",
    "Growth",
    "JobState",
    "LossTrack",
    "Move",
    "PlacedJob",
    "Placement",
    "Weights",
    "WorkerView",
    "balance_factor",
    "categorize",
    "choose_host",
    "counts",
    "interval_value",
    "placement_scores",
    "plan_rebalance",
]
