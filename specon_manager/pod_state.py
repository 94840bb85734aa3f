"""The pod's SpeCon state in one annotation (``specon.io/state``), so that ``kubectl describe
pod`` tells the story: the job's category, its CPU limit (cores), its predicted completion and
when this was written, from its node agent's heartbeats.

The manager writes it (it already patches pods; the agent has no right to), on the leader only,
once per loop pass, and only when it says something new, so the API server is not flooded:

- at once when the category changes (or the pod has none yet from this manager);
- otherwise at most once per ``min_interval_s`` per pod, and then only when the limit moved by
  0.01 core or more, the ETA appeared or went, or the ETA moved by more than
  ``max(ETA_MOVE_S, ETA_MOVE_SHARE x the time left)``;
- at most ``max_writes`` pods per pass (the rest wait for the next one).

What an agent reports is checked before it is written: the pod must be, by the API server's
word (the manager's pod directory), the one with that UID on the reporting node, and the patch
names the UID, so it cannot land on another pod of the same name.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from specon import rfc3339
from specon.names import ANNOTATION_STATE
from specon.wire import Heartbeat, JobReport

from .hot_calls import PodOnNode
from .kube import Kube, KubeError, pod_path
from .state import ClusterState

log = logging.getLogger(__name__)

#: An ETA that moved by less than this many seconds, or this share of the time left (the larger
#: of the two), is not written again.
ETA_MOVE_S = 60.0
ETA_MOVE_SHARE = 0.1
LIMIT_STEP = 0.01  # cores
#: The fewest seconds between two writes of one pod's annotation but for a category change.
MIN_INTERVAL_S = 30.0


@dataclass(frozen=True, slots=True)
class PodState:
    category: str
    limit_cores: float
    eta: float | None  # Unix time the job is predicted to complete; None: not known
    node: str


@dataclass(frozen=True, slots=True)
class _Written:
    state: PodState
    at: float  # monotonic


def pod_state(hb: Heartbeat, job: JobReport) -> PodState:
    """What the annotation says of ``job`` from its node's heartbeat ``hb``."""
    eta = None if job.predicted_finish_s is None else hb.time + job.predicted_finish_s
    return PodState(job.category.name.lower(), round(job.limit * hb.capacity_cpus, 2), eta, hb.node)


def worth_writing(last: _Written | None, new: PodState, now: float, wall: float,
                  min_interval_s: float) -> bool:
    """Whether ``new`` says enough more than what was last written (see the module's doc)."""
    if last is None or last.state.category != new.category or last.state.node != new.node:
        return True
    if now - last.at < min_interval_s:
        return False
    old = last.state
    if abs(old.limit_cores - new.limit_cores) >= LIMIT_STEP - 1e-9:
        return True
    if (old.eta is None) != (new.eta is None):
        return True
    if old.eta is None or new.eta is None:
        return False
    return abs(new.eta - old.eta) > max(ETA_MOVE_S, ETA_MOVE_SHARE * max(0.0, new.eta - wall))


def annotation(state: PodState, wall: float, observing: bool = False) -> str:
    """The annotation's value: compact JSON, times in RFC 3339 (UTC). In observe mode the
    limit is one the agent would set (``wouldLimitCores``): the pod's own limit is unchanged."""
    limit = {"wouldLimitCores" if observing else "limitCores": state.limit_cores}
    return orjson.dumps({
        "category": state.category, **limit,
        "predictedCompletion": None if state.eta is None else rfc3339.seconds(state.eta),
        "node": state.node, "updated": rfc3339.seconds(wall)}).decode()


class PodStateWriter:
    """Writes each reported job's ``specon.io/state`` when it is worth it (:meth:`run_once`)."""

    def __init__(self, kube: Kube, state: ClusterState, pod_on_node: PodOnNode | None,
                 min_interval_s: float = MIN_INTERVAL_S, max_writes: int = 50,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, observing: bool = False) -> None:
        self.kube = kube
        #: Observe mode: the reported limits are the agents' would-be limits.
        self.observing = observing
        self.state = state
        self.pod_on_node = pod_on_node
        self.min_interval_s = min_interval_s
        self.max_writes = max_writes
        self.clock = clock
        self.wall = wall
        self._written: dict[tuple[str, str, str], _Written] = {}

    def run_once(self) -> int:
        """One pass over the fresh nodes' jobs; returns the number of pods written."""
        now, wall = self.clock(), self.wall()
        seen: set[tuple[str, str, str]] = set()
        writes = 0
        for node, job in self.state.jobs(fresh_only=True):
            key = (job.namespace, job.pod, job.uid)
            seen.add(key)
            hb = self.state.heartbeat(node)
            if hb is None or not job.uid or writes >= self.max_writes:
                continue
            new = pod_state(hb, job)
            if not worth_writing(self._written.get(key), new, now, wall, self.min_interval_s):
                continue
            if self.pod_on_node is not None and self.pod_on_node(
                    job.namespace, job.pod, job.uid, node) is not True:
                continue  # not (yet) known to run there: not written from the agent's word
            writes += 1
            if self._write(job, new, wall):
                self._written[key] = _Written(new, now)
        for key in self._written.keys() - seen:
            del self._written[key]
        return writes

    def _write(self, job: JobReport, new: PodState, wall: float) -> bool:
        body = {"metadata": {"uid": job.uid, "annotations": {
            ANNOTATION_STATE: annotation(new, wall, self.observing)}}}
        try:
            self.kube.patch(pod_path(job.namespace, job.pod), body)
        except KubeError as exc:
            log.debug("%s/%s: state annotation not written: %s", job.namespace, job.pod, exc)
            # Not allowed (a namespace outside the chart's trainingNamespaces), gone, or
            # replaced (the UID precondition refused: 409): tried again only when its state
            # changes; the API server away or failing: at the next pass.
            return exc.status in (403, 404, 409, 422)
        log.debug("%s/%s: %s", job.namespace, job.pod, body["metadata"]["annotations"])
        return True
