"""Which pod runs where, by UID, from the API server: what the heartbeat check
(``create_app(pod_on_node=...)``) asks so that a node cannot report pods it does not run.

A pod seen for the first time is looked up on a background thread (one GET by namespace/name)
and the answer remembered for ``ttl_s`` (``unplaced_ttl_s`` for a pod that is missing or
not yet bound to a node); until the answer is in, the check says "cannot tell"
(None) and the job is kept, so a heartbeat never waits for the API server. A ghost pod is
therefore dropped from the node's next heartbeat on, not from its first one. Bounded: at most
``max_entries`` answers and ``max_pending`` lookups waiting (beyond them: cannot tell).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specon_manager.kube import KubeError, pod_path

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Seen:
    uid: str | None  # None: no such pod
    node: str
    at: float


class PodDirectory:
    """``on_node(namespace, pod, uid, node)``: True, False, or None (not known yet)."""

    def __init__(self, get: Callable[[str], dict[str, Any] | None], ttl_s: float = 60.0,
                 unplaced_ttl_s: float = 5.0, max_entries: int = 200_000, max_pending: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._get = get
        self.ttl_s = ttl_s
        self.unplaced_ttl_s = unplaced_ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._seen: OrderedDict[tuple[str, str], _Seen] = OrderedDict()
        self._pending: set[tuple[str, str]] = set()
        self._queue: queue.Queue[tuple[str, str]] = queue.Queue(max_pending)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def on_node(self, namespace: str, pod: str, uid: str, node: str) -> bool | None:
        key = (namespace, pod)
        with self._lock:
            seen = self._seen.get(key)
            # A pod with a UID and a node keeps both for life: remembered for ttl_s. A missing
            # or unbound one may appear or be bound soon, and a new UID is a new pod under the
            # same name: those are asked again sooner, or at once.
            if seen is not None and (not uid or seen.uid is None or uid == seen.uid):
                ttl = self.ttl_s if seen.uid is not None and seen.node else self.unplaced_ttl_s
                if self._clock() - seen.at <= ttl:
                    return seen.uid is not None and seen.node == node
            if key not in self._pending:
                try:
                    self._queue.put_nowait(key)
                    self._pending.add(key)
                except queue.Full:
                    pass
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pod-directory",
                                                daemon=True)
                self._thread.start()
        return None

    def _run(self) -> None:
        while True:
            key = self._queue.get()
            try:
                obj = self._get(pod_path(*key))
            except (KubeError, OSError) as exc:
                log.warning("pod %s/%s not looked up: %s", *key, exc)
                with self._lock:
                    self._pending.discard(key)
                continue
            meta = (obj or {}).get("metadata") or {}
            seen = _Seen(meta.get("uid") if obj else None,
                         ((obj or {}).get("spec") or {}).get("nodeName") or "", self._clock())
            with self._lock:
                self._pending.discard(key)
                self._seen[key] = seen
                self._seen.move_to_end(key)
                while len(self._seen) > self.max_entries:
                    self._seen.popitem(last=False)
