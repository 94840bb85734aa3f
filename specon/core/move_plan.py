"""The progress-aware policy's moves: a job moves by checkpoint and restore only when the
predicted sum of times to finish of the two nodes (:func:`specon.core.progress.predicted_times`)
falls by more than what the move costs (checkpoint + restore + restart, paid by the job and
counted again for every job of the target it delays). The simulator and the manager's
planner both call :func:`plan_moves`.

Pure: state in, decisions out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from specon.core.progress import (
    CANDIDATES,
    WEIGHTS,
    NodeLoad,
    backlog,
    guess_floor,
    guesses_floored,
    predicted_sum,
    predicted_times,
)
from specon.core.scoring import Weights

#: A job alone on its node is moved only where what it delays the target's jobs (by the sum)
#: is at most this share of the time it saves itself. For a job sharing its node the move's
#: gain is also its node-mates'; a lone job's trades only its own time against the target's
#: jobs, and the sum alone let it onto busy nodes (issue 28, the 180 held-out workloads as
#: installed: the worst job 3.82x -> 4.52x with no limit; never moving a lone job left one
#: that declares no total on a slower node for 2,000 s beside an empty fast one, `standard`
#: 32's +7.7% makespan; docs/parameters.md).
LONE_DELAY_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class PlannedMove:
    job: str
    source: str
    target: str
    gain_s: float  # predicted cut in the sum of times to finish, net of the move's cost


def plan_moves(nodes: Sequence[NodeLoad], cost_s: Mapping[str, float],
               movable: frozenset[str], busy: frozenset[str] = frozenset(),
               weights: Weights = WEIGHTS, limit: int = 1, margin: float = 1.0
               ) -> list[PlannedMove]:
    """Up to ``limit`` moves, best first, each worth more than it costs.

    ``cost_s``: seconds a job is stopped to move; ``busy``: nodes already sending or receiving
    a move (left alone). A job moves off a node to another when the sum of times to finish of
    both nodes falls by more than the move's cost counted for the job and for every job of the
    target it would delay; a job alone on its node, only where it delays the target's jobs by
    at most LONE_DELAY_SHARE of what it saves itself.
    """
    nodes = guesses_floored(nodes, guess_floor(nodes))
    sums = {n.name: predicted_sum(n, None, weights) for n in nodes}
    # a large cluster's cost: sources among the most loaded, targets among the least
    by_load = sorted(nodes, key=lambda n: (backlog(n), -n.capacity, n.name))
    if len(nodes) > 2 * CANDIDATES:
        nodes = by_load[:CANDIDATES] + by_load[-CANDIDATES:]
    plans: list[PlannedMove] = []
    used: set[str] = set(busy)
    for _ in range(limit):
        best: PlannedMove | None = None
        for src in nodes:
            if src.name in used or not src.jobs:
                continue
            for j in src.jobs:
                if j.name not in movable:
                    continue
                rest = NodeLoad(src.name, src.cpus, src.speed,
                                tuple(x for x in src.jobs if x.name != j.name))
                saved = sums[src.name] - predicted_sum(rest, None, weights)
                for dst in nodes:
                    if dst.name == src.name or dst.name in used:
                        continue
                    # ranked at the target by its work left alone (docs/algorithms.md, "Early
                    # progress": counting its early key there cost makespan)
                    times = predicted_times(dst, replace(j, attained=None), weights)
                    added = sum(times.values()) - sums[dst.name]
                    cost = cost_s.get(j.name, 0.0)
                    gain = saved - added - margin * cost
                    if len(src.jobs) == 1 and not _lone_move_fits(saved, added, times[j.name]):
                        continue
                    if gain > 0 and (best is None or gain > best.gain_s):
                        best = PlannedMove(j.name, src.name, dst.name, gain)
        if best is None:
            break
        plans.append(best)
        # both ends are now busy; no other node's prediction changed
        used.update((best.source, best.target))
    return plans


def _lone_move_fits(saved: float, added: float, own: float) -> bool:
    """Whether a job alone on its node, its own time there ``saved`` and ``own`` at a target
    where it adds ``added`` to the sum, delays the target's jobs by at most LONE_DELAY_SHARE
    of what it saves itself (:data:`LONE_DELAY_SHARE`)."""
    return added - own <= LONE_DELAY_SHARE * max(saved - own, 0.0) + 1e-9
