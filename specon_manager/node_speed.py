"""Each node's per-core speed, from its ``specon.io/cpu-speed`` label (docs/manager.md,
"Node speeds").

A real node's speed cannot be read from its CPU count, and the agents' work figures are
CPU-seconds of their own node: a job needs more of them on a slower node. Without speeds the
progress-aware placement and moves take every node as equally fast, and on a cluster whose
per-core speeds differ it packs slow nodes as if they were fast (benchmarks/suite.py
``--manager-view``, docs/results.md). The administrator, who knows the node pools, labels them;
the label is read from the manager's node watch cache (no API request per look-up).

A value that is not a number in [MIN_SPEED, MAX_SPEED] (specon.cpu_speed) counts as no label
and is logged once per node and value: a typo must not make a node look a thousand times
faster.

A node without a (sane) label is taken at the speed its agent measured
(specon_agent.speed_probe, ``Heartbeat.cpu_speed``), brought onto the labels' scale
(:func:`measured_scale`): labels are relative to whatever pool the administrator calls 1, the
probe to its own reference core. Where neither is known the node is taken at DEFAULT_SPEED, and
the placement knows that its speed is a guess (specon.core.job_loads.typical_load).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from specon.cpu_speed import DEFAULT_SPEED, MAX_SPEED, MIN_SPEED, parse_cpu_speed
from specon.names import LABEL_CPU_SPEED

log = logging.getLogger("specon.manager")


class NodeSpeeds:
    """``speed(name)`` from a lookup of Node objects (the node watch cache's ``get``): the
    label's speed, or None where the node has no sane label (or is not known)."""

    def __init__(self, get: Callable[[str], Mapping[str, Any] | None]) -> None:
        self._get = get
        self._warned: set[tuple[str, str]] = set()

    def speed(self, name: str) -> float | None:
        node = self._get(name)
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        raw = labels.get(LABEL_CPU_SPEED) if isinstance(labels, Mapping) else None
        if raw is None:
            return None
        speed = parse_cpu_speed(raw)
        if speed is None:
            key = (name, str(raw)[:64])
            if key not in self._warned:
                self._warned.add(key)
                log.warning("node %s: label %s=%r is not a number in [%g, %g]; taken as %g",
                            name, LABEL_CPU_SPEED, key[1], MIN_SPEED, MAX_SPEED,
                            DEFAULT_SPEED)
        return speed


def measured_scale(nodes: Iterable[tuple[float | None, float | None]]) -> float | None:
    """What a measured speed is multiplied by to be on the labels' scale, from each node's
    (label's speed, measured speed): 1 where no node is labelled (the probe's scale is the
    only one); the median of label / measured over the nodes that have both; None where nodes
    are labelled but none of them measured (agents older than the probe): an unlabelled node's
    measured speed cannot be put on the labels' scale and is not used."""
    ratios, labelled = [], False
    for label, measured in nodes:
        if label is not None:
            labelled = True
            if measured is not None:
                ratios.append(label / measured)
    if not labelled:
        return 1.0
    return statistics.median(ratios) if ratios else None
