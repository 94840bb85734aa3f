"""Training pods' quality targets and deadlines as the manager first sees them (the extender's
filter and prioritize calls carry the whole pod): the annotations are parsed once per pod UID
with :func:`specon.qos_annotations.parse`; a valid spec is remembered for placement, a
malformed one gets one Warning event ``InvalidQoS`` on the pod (once per UID, never a storm)
and the pod is scheduled without QoS, never refused.

Events are posted from a background thread: the extender answers without waiting for the API.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from specon.qos_annotations import ANNOTATIONS, QosSpec, parse_timestamp, read

log = logging.getLogger(__name__)

REASON_INVALID = "InvalidQoS"
#: Pods remembered (by UID); the oldest are forgotten first.
MAX_PODS = 50_000

#: ``post(pod, reason, message)`` posts a Warning event on the pod.
Poster = Callable[[Mapping[str, Any], str, str], None]


def _created(meta: Mapping[str, Any], now: Callable[[], datetime]) -> datetime:
    return parse_timestamp(meta.get("creationTimestamp")) or now()


class QosBook:
    """What the manager knows of each training pod's QoS annotations (thread-safe)."""

    def __init__(self, post: Poster | None = None, on_invalid: Callable[[], None] | None = None,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 max_pods: int = MAX_PODS) -> None:
        self.post = post
        self.on_invalid = on_invalid
        self.now = now
        self.max_pods = max_pods
        self._specs: OrderedDict[str, QosSpec | None] = OrderedDict()
        self._lock = threading.Lock()

    def observe(self, pod: Mapping[str, Any]) -> QosSpec | None:
        """The pod's spec (None: none stated, malformed, or neither a target nor a deadline);
        the first sight of a malformed one posts the event."""
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if not isinstance(annotations, Mapping) or not any(a in annotations for a in ANNOTATIONS):
            return None
        uid = str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")
        with self._lock:
            if uid in self._specs:
                self._specs.move_to_end(uid)
                return self._specs[uid]
        spec, error = read({k: str(v) for k, v in annotations.items()}, _created(meta, self.now))
        with self._lock:
            first = uid not in self._specs
            self._specs[uid] = spec
            while len(self._specs) > self.max_pods:
                self._specs.popitem(last=False)
        if error and first:
            if self.on_invalid is not None:
                self.on_invalid()
            log.warning("pod %s/%s: %s; scheduled without QoS", meta.get("namespace"),
                        meta.get("name"), error)
            if self.post is not None:
                self.post(pod, REASON_INVALID, error)
        return spec

    def spec(self, uid: str) -> QosSpec | None:
        with self._lock:
            return self._specs.get(uid)


class EventPoster:
    """Posts events from a daemon thread; a full queue drops the event (and logs it)."""

    def __init__(self, send: Callable[[Mapping[str, Any], str, str], None],
                 maxsize: int = 1000) -> None:
        self.send = send
        self._queue: queue.Queue[tuple[Mapping[str, Any], str, str]] = queue.Queue(maxsize)
        self._thread = threading.Thread(target=self._run, name="specon-events", daemon=True)
        self._thread.start()

    def __call__(self, pod: Mapping[str, Any], reason: str, message: str) -> None:
        try:
            self._queue.put_nowait((pod, reason, message))
        except queue.Full:
            log.warning("event %s dropped: the event queue is full", reason)

    def _run(self) -> None:
        while True:
            pod, reason, message = self._queue.get()
            try:
                self.send(pod, reason, message)
            except Exception:  # an event is never worth the thread
                log.exception("event %s not posted", reason)
            finally:
                self._queue.task_done()

    def join(self) -> None:
        """Wait until every queued event was sent (tests)."""
        self._queue.join()
