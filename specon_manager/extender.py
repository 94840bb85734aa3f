"""The scheduler extender: kube-scheduler's filter and prioritize calls, in its exact JSON.

The types mirror ``k8s.io/kube-scheduler/extender/v1``, which has no json tags, so the keys on
the wire are the Go field names (``Pod``, ``Nodes``, ``NodeNames``, ``FailedNodes``, ...). With
``nodeCacheCapable: false`` the scheduler sends full ``Nodes`` and reads ``Nodes`` back; with
``true`` it sends and reads ``NodeNames``. Pods that are not training jobs pass untouched.

A training pod's QoS annotations are read here (the first sight of the pod, see
:mod:`specon_manager.qos_book`); one with a deadline or a target is scored by
:func:`specon.core.qos_rules.qos_placement_scores` instead of the SpeCon score.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from specon.kinds import pod_kind
from specon.names import migratable
from specon_manager.job_keys import is_training_pod, kind_key, pod_key, reservation_key
from specon_manager.node_table import MAX_PRIORITY
from specon_manager.qos_book import QosBook
from specon_manager.state import ClusterState

__all__ = ["MAX_PRIORITY", "BadRequest", "ExtenderArgs", "ExtenderFilterResult", "HostPriority",
           "TooManyNodes", "check_node_count", "filter_nodes", "names_over",
           "prioritize_nodes"]


class _Go(BaseModel):
    model_config = ConfigDict(extra="allow")


class ExtenderArgs(_Go):
    """extenderv1.ExtenderArgs: the pod and the candidate nodes (full objects or names)."""

    Pod: dict[str, Any]
    Nodes: dict[str, Any] | None = None
    NodeNames: list[str] | None = None


class ExtenderFilterResult(_Go):
    Nodes: dict[str, Any] | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = {}
    FailedAndUnresolvableNodes: dict[str, str] = {}
    Error: str = ""


class HostPriority(_Go):
    Host: str
    Score: int


class BadRequest(ValueError):
    """The scheduler sent something that is not an ExtenderArgs."""


class TooManyNodes(BadRequest):
    """More candidate nodes than the manager serves (``max_extender_nodes``): refused before
    any of them is looked at, since every step after the decode costs with their number."""


#: The start of ExtenderArgs' NodeNames list in the undecoded JSON.
_NAMES_KEY = re.compile(rb'"NodeNames"[ \t\r\n]*:[ \t\r\n]*\[')
_SCAN_BYTES = 64 * 1024


def names_over(body: bytes, limit: int) -> int | None:
    """A look before the decode: how many NodeNames the undecoded ``body`` (or its start)
    holds, once that is over ``limit`` (None: not over, or the key not written plainly; the
    decode and :func:`check_node_count` decide). Counted from the list's commas, 64 KiB at a
    time, so an oversized list is refused from its first few hundred KB, before the decode of
    megabytes that holds the interpreter (and so the heartbeats) for tens of ms. A node name
    never holds a comma (a DNS subdomain), so the count is never over the names a valid body
    has."""
    found = _NAMES_KEY.search(body)
    if found is None:
        return None
    pos = found.end()
    end = body.find(b"]", pos)
    end = len(body) if end < 0 else end
    commas = 0
    while pos < end:
        commas += body.count(b",", pos, min(pos + _SCAN_BYTES, end))
        pos += _SCAN_BYTES
        if commas + 1 > limit:
            return commas + 1
    return None


def check_node_count(args: Mapping[str, Any], limit: int) -> None:
    """Refuse (:class:`TooManyNodes`) ExtenderArgs that name more than ``limit`` nodes."""
    names = args.get("NodeNames")
    nodes = args.get("Nodes")
    items = nodes.get("items") if isinstance(nodes, dict) else None
    count = len(names) if isinstance(names, list) else (
        len(items) if isinstance(items, list) else 0)
    if count > limit:
        raise TooManyNodes(f"{'NodeNames' if isinstance(names, list) else 'Nodes.items'} "
                           f"names {count} nodes, over the manager's max_extender_nodes "
                           f"({limit}): refused")


def _node_names(args: Mapping[str, Any]) -> tuple[list[str], list[dict[str, Any]] | None]:
    names = args.get("NodeNames")
    if names is not None:
        if not isinstance(names, list):
            raise BadRequest("NodeNames must be a list of strings")
        try:
            "".join(names)  # the quickest check that every item is a str (5,000: ~20 µs)
        except TypeError:
            raise BadRequest("NodeNames must be a list of strings") from None
        return names, None
    nodes = args.get("Nodes")
    if nodes is None:
        return [], None
    items = nodes.get("items") if isinstance(nodes, dict) else None
    if not isinstance(items, list):
        raise BadRequest("Nodes must be a NodeList with items")
    out: list[str] = []
    for item in items:
        name = item.get("metadata", {}).get("name") if isinstance(item, dict) and isinstance(
            item.get("metadata", {}), dict) else None
        if not isinstance(name, str):
            raise BadRequest("every node in Nodes.items needs metadata.name (a string)")
        out.append(name)
    return out, items


def _str_map(obj: Mapping[str, Any], key: str, where: str) -> None:
    value = obj.get(key)
    if value is None:
        return
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise BadRequest(f"{where}.{key} must be an object of strings")


#: The fields of an owner reference and their JSON types (the API's OwnerReference).
_OWNER_FIELDS: dict[str, type] = {"apiVersion": str, "kind": str, "name": str, "uid": str,
                                  "controller": bool, "blockOwnerDeletion": bool}


def _owner_references(refs: object) -> None:
    if refs is None:
        return
    if not isinstance(refs, list) or not all(isinstance(r, dict) for r in refs):
        raise BadRequest("Pod.metadata.ownerReferences must be a list of objects")
    for i, ref in enumerate(refs):
        for key, kind in _OWNER_FIELDS.items():
            value = ref.get(key)
            if value is not None and not isinstance(value, kind):
                raise BadRequest(f"Pod.metadata.ownerReferences[{i}].{key} must be a "
                                 f"{'boolean' if kind is bool else 'string'}")


def _pod(args: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod, with the parts this module reads checked for type (a wrongly typed pod is a
    400 naming the field, never an error inside)."""
    pod = args.get("Pod")
    if not isinstance(pod, dict):
        raise BadRequest("Pod must be an object")
    meta = pod.get("metadata")
    if meta is not None:
        if not isinstance(meta, dict):
            raise BadRequest("Pod.metadata must be an object")
        _str_map(meta, "labels", "Pod.metadata")
        _str_map(meta, "annotations", "Pod.metadata")
        for key in ("name", "namespace", "uid", "creationTimestamp"):
            if meta.get(key) is not None and not isinstance(meta[key], str):
                raise BadRequest(f"Pod.metadata.{key} must be a string")
        _owner_references(meta.get("ownerReferences"))
    spec = pod.get("spec")
    if spec is not None:
        if not isinstance(spec, dict):
            raise BadRequest("Pod.spec must be an object")
        if spec.get("schedulerName") is not None and not isinstance(spec["schedulerName"], str):
            raise BadRequest("Pod.spec.schedulerName must be a string")
    return pod


def filter_nodes(state: ClusterState, args: Mapping[str, Any], scheduler_name: str,
                 qos: QosBook | None = None) -> dict[str, Any]:
    """ExtenderFilterResult for ``args`` (a decoded ExtenderArgs). QoS never filters: a
    malformed annotation gets an event from ``qos`` and the pod is scheduled without QoS."""
    pod = _pod(args)
    names, items = _node_names(args)
    failed: dict[str, str] = {}
    if is_training_pod(pod, scheduler_name):
        if qos is not None:
            qos.observe(pod)
        res = state.reservation(reservation_key(pod))
        if res is not None:
            meta = pod.get("metadata") or {}
            # A namesake of the source asking for a node is its replacement, and the source is
            # gone: names are unique, and the source, bound, is never scheduled again. A
            # StatefulSet or PyTorchJob recreates the name at once, often before the manager
            # next looks; waiting for that look left the pod unschedulable for tens of seconds.
            present = res.source_present and res.pod != pod_key(
                str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            for n in names:
                if present:
                    failed[n] = (f"migration {res.migration_id}: waiting for the pod it replaces "
                                 "to terminate")
                elif n != res.target:
                    failed[n] = f"migration {res.migration_id}: reserved for node {res.target}"
    return filter_result(names, items, failed)


def filter_result(names: list[str], items: list[dict[str, Any]] | None,
                  failed: dict[str, str]) -> dict[str, Any]:
    """ExtenderFilterResult: the nodes asked about (``items`` when the call sent Nodes, else
    ``names``) less ``failed``, each with its reason."""
    reply: dict[str, Any] = {"FailedNodes": failed, "FailedAndUnresolvableNodes": {},
                             "Error": ""}
    if items is not None:
        reply["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "items": [
            i for i in items if i["metadata"]["name"] not in failed]}
        reply["NodeNames"] = None
    else:  # nothing failed (the usual case): the names as they came
        reply["Nodes"] = None
        reply["NodeNames"] = [n for n in names if n not in failed] if failed else names
    return reply


def prioritize_nodes(state: ClusterState, args: Mapping[str, Any], scheduler_name: str,
                     qos: QosBook | None = None) -> bytes:
    """HostPriorityList for ``args`` (JSON bytes): 0..10, higher is better; 0 for unknown or
    stale nodes.
    A pod with a deadline or a target (read by ``qos``) is scored by free CPU and at-risk
    jobs; any other training pod by the SpeCon score."""
    pod = _pod(args)
    names, _ = _node_names(args)
    if not is_training_pod(pod, scheduler_name):
        return state.encoded_scores(names, [0] * len(names))
    res = state.reservation(reservation_key(pod))
    if res is not None:
        return state.encoded_scores(names, [MAX_PRIORITY if n == res.target else 0
                                            for n in names])
    spec = qos.observe(pod) if qos is not None else None
    kind = pod_kind(pod)
    meta = pod.get("metadata") or {}
    key = kind_key(str(meta.get("namespace") or "default"), kind) if kind else None
    movable = migratable(meta.get("labels") or {})
    return state.encoded_priorities(names, qos=spec is not None, kind=key, movable=movable)
