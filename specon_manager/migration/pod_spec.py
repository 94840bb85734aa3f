"""What a pod spec says about the node it may run on, and the changes a migration makes to a
replacement's spec: whether it fits a node (nodeSelector, required node affinity), pinned to
the target and unpinned again, and the owner's CPU limit."""

from __future__ import annotations

import copy
from typing import Any

from specon.quantity import millicores, parse_cpu
from specon_manager.kube import labels_of, meta


def with_cpu_limit(spec: dict[str, Any], container: str, cores: float) -> None:
    """Set ``container``'s CPU limit in a pod spec (in place), and lower its CPU request to it
    when above (the API refuses a request over the limit)."""
    for c in spec.get("containers") or ():
        if c.get("name") != container:
            continue
        res = c.setdefault("resources", {})
        value = millicores(cores)
        res.setdefault("limits", {})["cpu"] = value
        req = (res.get("requests") or {}).get("cpu")
        try:
            above = req is not None and parse_cpu(req) > cores
        except ValueError:
            above = False
        if above:
            res["requests"]["cpu"] = value


def cpu_limit_of(spec: dict[str, Any], container: str) -> float | None:
    """``container``'s CPU limit in a pod spec (cores), or None: none, or not readable."""
    for c in spec.get("containers") or ():
        if c.get("name") == container:
            cpu = ((c.get("resources") or {}).get("limits") or {}).get("cpu")
            try:
                return None if cpu is None else parse_cpu(str(cpu))
            except ValueError:
                return None
    return None


def _matches(req: dict[str, Any], value: str | None) -> bool:
    """One node selector requirement (``key``, ``operator``, ``values``) against the node's
    value for its key (None: the node has no such label)."""
    op, values = req.get("operator"), [str(v) for v in req.get("values") or ()]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def fits(spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether a pod with this spec may go to ``node`` as far as its ``nodeSelector`` and its
    required node affinity say: the rules of Kubernetes' NodeAffinity filter (terms ORed, a
    term's requirements ANDed, an empty term matching nothing). Kueue's ResourceFlavors pin
    admitted pods to their nodes this way. Taints and free resources are the scheduler's."""
    labels = labels_of(node)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    fields = {"metadata.name": meta(node).get("name")}
    for term in required.get("nodeSelectorTerms") or ():
        exprs = term.get("matchExpressions") or []
        by_field = term.get("matchFields") or []
        if (exprs or by_field) and all(_matches(e, labels.get(e.get("key"))) for e in exprs) and (
                all(_matches(f, fields.get(f.get("key"))) for f in by_field)):
            return True
    return False


def _pin_term(node: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": "In", "values": [node]}


def pinned(spec: dict[str, Any], node: str) -> dict[str, Any]:
    """A copy of a pod spec that can only be scheduled onto ``node``: a required node-affinity
    field term, added to every existing term (terms are ORed, a term's parts ANDed). This holds
    even while the extender is away (``ignorable: true``)."""
    out = copy.deepcopy(spec)
    affinity = out.setdefault("affinity", {})
    node_aff = affinity.setdefault("nodeAffinity", {})
    required = node_aff.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term.setdefault("matchFields", []).append(_pin_term(node))
    required["nodeSelectorTerms"] = terms
    return out


def unpinned(spec: dict[str, Any], node: str) -> dict[str, Any]:
    """``spec`` without what :func:`pinned` added."""
    out = copy.deepcopy(spec)
    affinity = out.get("affinity") or {}
    node_aff = affinity.get("nodeAffinity") or {}
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = []
    for term in required.get("nodeSelectorTerms") or ():
        fields = [f for f in term.get("matchFields") or () if f != _pin_term(node)]
        term = {k: v for k, v in term.items() if k != "matchFields"}
        if fields:
            term["matchFields"] = fields
        if term:
            terms.append(term)
    if terms:
        required["nodeSelectorTerms"] = terms
    else:
        node_aff.pop("requiredDuringSchedulingIgnoredDuringExecution", None)
    if not node_aff:
        affinity.pop("nodeAffinity", None)
    if not affinity:
        out.pop("affinity", None)
    return out


