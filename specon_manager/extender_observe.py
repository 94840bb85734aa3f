"""The extender in observe mode (``enforcement: observe``): kube-scheduler is answered
neutrally, every node passing and every node scored alike, so that its own plugins decide;
what SpeCon would have answered is computed as when enforcing and recorded instead
(``specon_manager_would_prioritize_total``, the scores in the debug log; docs/manager.md,
"Observe mode")."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson

from specon_manager.extender import (
    _node_names,
    _pod,
    filter_nodes,
    filter_result,
    prioritize_nodes,
)
from specon_manager.job_keys import is_training_pod
from specon_manager.metrics import ManagerMetrics
from specon_manager.qos_book import QosBook
from specon_manager.state import ClusterState

log = logging.getLogger("specon_manager.extender")


def observed_filter(state: ClusterState, args: Mapping[str, Any], scheduler_name: str,
                    qos: QosBook | None = None) -> dict[str, Any]:
    """ExtenderFilterResult with every node passing; the one enforcing would give is computed
    (a QoS annotation is read as when enforcing) and what it would have failed is logged."""
    would = filter_nodes(state, args, scheduler_name, qos)
    names, items = _node_names(args)
    if would["FailedNodes"]:
        meta = _pod(args).get("metadata") or {}
        log.info("observe mode: would filter out for %s/%s: %s", meta.get("namespace"),
                 meta.get("name"), would["FailedNodes"])
    return filter_result(names, items, {})


def observed_prioritize(state: ClusterState, args: Mapping[str, Any], scheduler_name: str,
                        metrics: ManagerMetrics, qos: QosBook | None = None) -> bytes:
    """HostPriorityList (JSON bytes) of equal scores (0: no preference); a training pod's
    would-be scores are computed, counted and logged (debug)."""
    pod = _pod(args)
    names, _ = _node_names(args)
    if is_training_pod(pod, scheduler_name):
        scores = {h["Host"]: h["Score"] for h in orjson.loads(
            prioritize_nodes(state, args, scheduler_name, qos))}
        metrics.would_prioritize.labels(
            "preferred" if len(set(scores.values())) > 1 else "indifferent").inc()
        if log.isEnabledFor(logging.DEBUG):
            meta = pod.get("metadata") or {}
            log.debug("observe mode: would score %s/%s: %s", meta.get("namespace"),
                      meta.get("name"), scores)
    return state.encoded_scores(names, [0] * len(names))
