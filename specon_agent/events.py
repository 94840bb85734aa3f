"""Kubernetes Events for the CPU limits the agent writes, so that ``kubectl describe pod`` shows
what SpeCon did (docs/agent.md, "Events").

The loop only offers a :class:`LimitNote` to a bounded queue (never waits; a full queue drops
the note and counts it); a daemon thread aggregates and posts. At most one Event per pod per
``window_s``: the first change posts at once, later ones in the window are merged into one
Event posted when the window ends (first limit before, last limit after, the count in the note).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from specon.core.node import NodeController
from specon.kube_events import event_body
from specon.names import REPORTER_AGENT

log = logging.getLogger(__name__)

CONTROLLER = REPORTER_AGENT
ACTION = "Throttle"
LOWERED, RAISED, RESTORED = "CPULimitLowered", "CPULimitRaised", "CPULimitRestored"
#: Observe mode's reason: a change the agent decided and did not write.
WOULD = "WouldLimitCPU"
#: The shortest time between two Events about one pod (seconds).
WINDOW_S = 60.0
QUEUE_SIZE = 1000

#: Posts one events.k8s.io/v1 Event body (raises on failure).
Sender = Callable[[dict[str, Any]], None]
PodKey = tuple[str, str, str]  # namespace, pod, uid


@dataclass(frozen=True, slots=True)
class LimitNote:
    """One limit change of a pod's container (cores; None: unlimited)."""

    namespace: str
    pod: str
    uid: str
    container: str
    before: float | None
    after: float | None
    restored: bool = False  # the owner's limit put back
    category: str | None = None  # PC, WC or CC
    why: str | None = None  # what decided the limit, where known
    count: int = 1  # the changes this note stands for (aggregated)
    last_reason: str | None = None  # a merged note's last change's (it may end where it began)
    observed: bool = False  # observe mode: decided, not written

    @property
    def direction(self) -> str:
        """lowered or raised (a flap that ends where it began: its last change's)."""
        if self.before == self.after and self.last_reason is not None:
            return "lowered" if self.last_reason == LOWERED else "raised"
        before = math.inf if self.before is None else self.before
        after = math.inf if self.after is None else self.after
        return "lowered" if after < before else "raised"

    @property
    def key(self) -> PodKey:
        return self.namespace, self.pod, self.uid

    @property
    def reason(self) -> str:
        if self.restored:
            return RESTORED
        if self.observed:
            return WOULD
        return LOWERED if self.direction == "lowered" else RAISED

    def message(self, window_s: float) -> str:
        if self.observed:
            text = (f"observe mode: CPU limit of container {self.container} would be "
                    f"{self.direction} from {_cores(self.before)} to {_cores(self.after)} "
                    "(not written)")
        else:
            verb = "restored" if self.restored else self.direction
            text = (f"CPU limit of container {self.container} {verb} from "
                    f"{_cores(self.before)} to {_cores(self.after)}")
        if self.category:
            text += f"; job {self.category}"
        if self.why:
            text += f"; {self.why}"
        if self.count > 1:
            text += f" ({self.count} changes within {window_s:g} s, merged)"
        return text


def _cores(v: float | None) -> str:
    if v is None:
        return "unlimited"
    return f"{v:.3g} core" + ("" if v == 1 else "s")


class Aggregator:
    """At most one note per pod per ``window_s`` (pure: the caller passes the time)."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._posted: dict[PodKey, float] = {}  # when each pod's last note went out
        self._pending: dict[PodKey, LimitNote] = {}

    def offer(self, note: LimitNote, now: float) -> LimitNote | None:
        """The note to post now, or None: merged into the pod's pending one."""
        key = note.key
        held = self._pending.get(key)
        if held is None and now - self._posted.get(key, -math.inf) >= self.window_s:
            self._posted[key] = now
            return note
        self._pending[key] = note if held is None else replace(
            note, before=held.before, count=held.count + note.count,
            last_reason=LOWERED if note.direction == "lowered" else RAISED)
        return None

    def due(self, now: float) -> list[LimitNote]:
        """The merged notes whose window has ended (and forget pods quiet for a window)."""
        out = []
        for key, posted in list(self._posted.items()):
            if now - posted < self.window_s:
                continue
            note = self._pending.pop(key, None)
            if note is None:
                del self._posted[key]
            else:
                self._posted[key] = now
                out.append(note)
        return out

    def next_due(self) -> float:
        """When :meth:`due` next has a note (inf: none pending)."""
        return min((self._posted[k] + self.window_s for k in self._pending), default=math.inf)

    def flush(self) -> list[LimitNote]:
        out = list(self._pending.values())
        self._pending.clear()
        return out


class LimitEvents:
    """Posts limit Events from a daemon thread; ``count(outcome)`` counts posted, merged,
    dropped (queue full) and failed (the API refused or did not answer; logged once)."""

    def __init__(self, send: Sender, instance: str, window_s: float = WINDOW_S,
                 maxsize: int = QUEUE_SIZE, count: Callable[[str], None] = lambda _: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.send = send
        self.instance = instance
        self.count = count
        self.clock = clock
        self.aggregator = Aggregator(window_s)
        self._queue: queue.Queue[LimitNote | None] = queue.Queue(maxsize)
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="specon-limit-events",
                                        daemon=True)
        self._thread.start()

    def offer(self, note: LimitNote) -> None:
        """Never blocks: a full queue drops the note."""
        try:
            self._queue.put_nowait(note)
        except queue.Full:
            self.count("dropped")

    def close(self, timeout: float = 5.0) -> None:
        """Post what is queued and pending (windows cut short), for at most ``timeout``."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        agg = self.aggregator
        while True:
            wait = min(max(0.0, agg.next_due() - self.clock()), 1.0)
            try:
                note = self._queue.get(timeout=wait)
            except queue.Empty:
                note = None
            else:
                if note is None:  # closing
                    for held in agg.flush():
                        self._post(held)
                    return
            if note is not None:
                ready = agg.offer(note, self.clock())
                if ready is None:
                    self.count("merged")
                else:
                    self._post(ready)
            for held in agg.due(self.clock()):
                self._post(held)

    def _post(self, note: LimitNote) -> None:
        obj = {"apiVersion": "v1",
               "metadata": {"name": note.pod, "namespace": note.namespace, "uid": note.uid}}
        body = event_body(obj, note.reason, note.message(self.aggregator.window_s),
                          action=ACTION, controller=CONTROLLER, instance=self.instance)
        try:
            self.send(body)
        except Exception as exc:  # an Event is never worth the thread
            self.count("failed")
            if not self._warned:
                self._warned = True
                log.warning("limit event %s on %s/%s not posted: %s (further failures are only "
                            "counted: specon_agent_limit_events_total{outcome=\"failed\"})",
                            note.reason, note.namespace, note.pod, exc)
            return
        self.count("posted")


def limit_source(control: NodeController, cid: str, share_rule: str | None) -> str:
    """What decided a job's limit, in words (the order NodeController.limits applies)."""
    if cid in control.qos_limits:
        return "set for quality targets and deadlines (docs/qos.md)"
    if cid in control.shares:
        return f"set by the node share rule {share_rule}"
    flow = control.flow_list(cid)
    return "set by FlowCon" + (f" (list {flow.value})" if flow is not None else "")


def kube_sender(api_client: Any) -> Sender:
    """Posts through the ``kubernetes`` package's events.k8s.io/v1 client."""
    from kubernetes import client

    api = client.EventsV1Api(api_client)

    def send(body: dict[str, Any]) -> None:
        # A dict body is sent as it is (the client's models are for reading).
        api.create_namespaced_event(body["metadata"]["namespace"], body)  # type: ignore[arg-type]

    return send
