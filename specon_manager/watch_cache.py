"""Objects the manager reads every round, kept by list + watch (an informer's reflector, small):
one LIST, then a WATCH from its ``resourceVersion`` that keeps the copy current, resumed from
the last version seen when the API server ends it, and a new LIST only when that version is
too old (410 Gone). A round reads the copy, so what it costs the API server no longer grows
with the objects outside SpeCon (docs/manager.md, "What the manager reads").

The copy is only used while it is known to be current (:attr:`WatchCache.current`: listed and
the watch connected since); otherwise the caller asks the API server as before, and fails as
before when it is away."""

from __future__ import annotations

import logging
import threading
from typing import Any

from specon_manager.kube import Kube, KubeError, meta

log = logging.getLogger(__name__)

#: How long the API server keeps a watch open before it ends it (it is then resumed).
WATCH_TIMEOUT_S = 300
#: How long to wait before trying again after a failed list or watch, doubling up to the max.
RETRY_S = 0.5
RETRY_MAX_S = 30.0


def _key(obj: dict[str, Any]) -> str:
    md = meta(obj)
    ns = md.get("namespace")
    return f"{ns}/{md.get('name')}" if ns else str(md.get("name"))


class WatchCache:
    """The objects at ``path`` (a collection, cluster-wide or in a namespace) that ``params``
    select (``labelSelector``, ``fieldSelector``), kept current on a thread of its own."""

    def __init__(self, kube: Kube, path: str, name: str, *,
                 watch_timeout_s: int = WATCH_TIMEOUT_S, **params: str) -> None:
        self.kube = kube
        self.path = path
        self.name = name
        self.params = params
        self.watch_timeout_s = watch_timeout_s
        self._objs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._current = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Lists made (the first and each one after a 410): for tests and the logs.
        self.lists = 0

    # -- what the rounds read ----------------------------------------------------------------
    @property
    def current(self) -> bool:
        """Listed, and the watch connected since (or being resumed after the server ended it
        as it does every ``watch_timeout_s``); not after a failed list or watch."""
        return self._current.is_set()

    def wait_current(self, timeout: float) -> bool:
        return self._current.wait(timeout)

    def items(self) -> list[dict[str, Any]]:
        """The objects (shared, not copies: read them, never change them)."""
        with self._lock:
            return list(self._objs.values())

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        with self._lock:
            return self._objs.get(f"{namespace}/{name}" if namespace else name)

    # -- life cycle --------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"watch-{self.name}",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop keeping the copy (the thread ends when its watch does: it is a daemon)."""
        self._stop.set()
        self._current.clear()

    # -- the reflector -----------------------------------------------------------------------
    def _run(self) -> None:
        version = ""
        delay = RETRY_S
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._list()
                version = self._watch(version)
                delay = RETRY_S
            except (KubeError, OSError, ValueError) as exc:
                self._current.clear()
                if self._stop.is_set():  # its client closed its watch under it: stopping
                    return
                if isinstance(exc, KubeError) and exc.status == 410:
                    version = ""
                log.warning("watch %s: %s; again in %.1f s", self.name, exc, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, RETRY_MAX_S)
            except RuntimeError:
                # httpx's "client has been closed": the owner stopped this cache and closed
                # its client while the watch was still open; anything else is a bug.
                if self._stop.is_set():
                    return
                raise

    def _list(self) -> str:
        items, version = self.kube.list_with_version(self.path, **self.params)
        with self._lock:
            self._objs = {_key(o): o for o in items}
        self.lists += 1
        self._current.set()
        log.info("watch %s: listed %d objects at version %s", self.name, len(items), version)
        return version

    def _watch(self, version: str) -> str:
        """Apply the watch's events from ``version``; the last version seen when it ends."""
        for event in self.kube.watch(self.path, version, self.watch_timeout_s,
                                     on_open=self._current.set, **self.params):
            if self._stop.is_set():
                break
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                raise KubeError(int(obj.get("code") or 0), str(obj.get("reason", "")),
                                str(obj.get("message", "")))
            version = str(meta(obj).get("resourceVersion") or version)
            if kind == "BOOKMARK":
                continue
            with self._lock:
                if kind == "DELETED":
                    self._objs.pop(_key(obj), None)
                else:  # ADDED, MODIFIED
                    self._objs[_key(obj)] = obj
        return version
