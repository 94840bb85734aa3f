"""The events.k8s.io/v1 Event bodies the manager and the node agent post: one shape, so that
``kubectl describe`` and ``kubectl events`` show both alike (docs/manager.md, docs/agent.md)."""

from __future__ import annotations

import time
from typing import Any

from specon import rfc3339

#: The API's limits on an Event's ``note`` (bytes) and ``reportingInstance`` (characters).
NOTE_BYTES = 1024
INSTANCE_CHARS = 128
#: An object name is a DNS subdomain: at most 253 characters.
_NAME_CHARS = 253


def events_path(namespace: str) -> str:
    """Where Events are posted: events.k8s.io/v1 (core/v1's Event fields ``involvedObject``,
    ``message``, ``source``, ``firstTimestamp`` ... are deprecated)."""
    return f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"


def event_body(obj: dict[str, Any], reason: str, message: str, *, action: str,
               controller: str, instance: str, kind: str = "Pod",
               warning: bool = False) -> dict[str, Any]:
    """An events.k8s.io/v1 Event about ``obj`` (its ``metadata`` needs name and namespace;
    uid, so that ``kubectl describe`` finds it): ``action`` is what the reporter did or tried
    (``Migrate``, ``Throttle``), ``reason`` why, ``message`` the note (cut to the API's 1 KiB,
    on a character boundary); ``controller`` and ``instance`` the reporter.

    Named as client-go's recorder names them, ``<object>.<time in ns, hex>``: the events API
    validates a ``generateName`` as a name, and ``<object>.`` is not one."""
    md = obj.get("metadata") or {}
    now = time.time_ns()
    stamp = f"{now:x}"
    base = md["name"][:_NAME_CHARS - len(stamp) - 1].rstrip("-.") or "event"
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": f"{base}.{stamp}", "namespace": md["namespace"]},
        "regarding": {"apiVersion": obj.get("apiVersion", "v1"), "kind": kind,
                      "name": md["name"], "namespace": md["namespace"],
                      "uid": md.get("uid", "")},
        "reason": reason,
        "note": message.encode(errors="replace")[:NOTE_BYTES].decode(errors="ignore"),
        "type": "Warning" if warning else "Normal",
        "action": action,
        "reportingController": controller, "reportingInstance": instance[:INSTANCE_CHARS],
        "eventTime": rfc3339.micro_ns(now),
    }

