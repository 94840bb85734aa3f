"""The manager's live view: each worker's last heartbeat, the reservations of migrations in
flight and the checkpoint requests waiting for agents. Thread-safe; no I/O."""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from specon import names
from specon.core.categorize import Category
from specon.core.progress import (
    CANDIDATES,
    NodeLoad,
    load_key,
    placement_scores,
    reported_load,
)
from specon.core.qos_rules import qos_priorities
from specon.core.scoring import (
    INCOMING,
    Weights,
    WorkerView,
    placement_priorities,
    worker_view,
)
from specon.wire import LABEL_TRAINING, QOS_STATES, CheckpointRequest, Heartbeat, JobReport
from specon_manager.heartbeat_order import Kept, Retired, newer
from specon_manager.kube import OWNERS

#: Annotation on a bare replacement pod naming the migration it belongs to.
ANNOTATION_MIGRATION_ID = names.ANNOTATION_MIGRATION_ID


#: The placement rules the extender runs, by name (a policy's ``placement``).
PLACEMENTS: dict[str, Callable[[ClusterState, list[str], int], list[int]]] = {}


def pod_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def job_key(pod: Mapping[str, Any]) -> str:
    """The identity of the job a pod runs: its controlling Job, StatefulSet or ReplicaSet, else
    the pod itself.

    An owned pod's replacement has the same owner (a Job's and a ReplicaSet's a new name, a
    StatefulSet's the same name); a bare pod's replacement carries
    the migration id of the pod it replaces (see :func:`reservation_key`)."""
    meta = pod.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") in OWNERS:
            return f"job/{ref.get('uid', '')}"
    return f"pod/{meta.get('namespace', '')}/{meta.get('name', '')}"


def reservation_key(pod: Mapping[str, Any]) -> str:
    """The key under which a reservation for this (replacement) pod is held."""
    meta = pod.get("metadata") or {}
    mig = (meta.get("annotations") or {}).get(ANNOTATION_MIGRATION_ID)
    key = job_key(pod)
    if key.startswith("pod/") and mig:
        return f"migration/{mig}"
    return key


def is_training_pod(pod: Mapping[str, Any], scheduler_name: str) -> bool:
    """The agent's opt-in rule (specon.names.opted_in): the training label or annotation, or
    the SpeCon scheduler."""
    return names.opted_in(pod, LABEL_TRAINING, scheduler_name)


@dataclass(frozen=True, slots=True)
class Reservation:
    """A migration's claim on its target: the extender admits the replacement only there, and
    only once the pod it replaces is gone (never two pods of one job)."""

    key: str
    migration_id: str
    target: str
    source_node: str
    source_present: bool = True
    pod: str = ""  # namespace/name of the pod it moves (what its source's heartbeat reports)


#: kube-scheduler's extender priorities run 0..10 (extenderv1.MaxExtenderPriority).
MAX_PRIORITY = 10


def host_priority(name: str, score: int) -> bytes:
    """One HostPriority of the extender's wire, ``{"Host":"<name>","Score":<score>}``."""
    return b'{"Host":' + orjson.dumps(name) + b',"Score":' + str(score).encode() + b"}"


#: A kept heartbeat's JSON may be at most this many bytes per job (plus one such allowance):
#: a padded body is re-encoded, so the memory a node costs follows what it reports.
RAW_BYTES_PER_JOB = 1024


_CATEGORIES = tuple(Category)  # iterating the Enum itself costs a few µs a heartbeat


@functools.lru_cache(maxsize=512)
def _decode(raw: bytes) -> Heartbeat:
    return Heartbeat.model_validate_json(raw)


class NodeRecord:
    """A node's last heartbeat, kept as its (validated) JSON and decoded on demand (the last
    few hundred decoded are cached): 100 jobs as pydantic models take about 160 KB and 2,500
    objects that the garbage collector walks on every full collection, as JSON about 15 KB
    and one object. What the extender and the metrics need is summed at record time."""

    __slots__ = ("boot", "categories", "cpus", "load", "node", "pods", "qos", "raw", "received",
                 "seq", "time", "work")

    def __init__(self, hb: Heartbeat, received: float, raw: bytes | None = None) -> None:
        if raw is None or len(raw) > RAW_BYTES_PER_JOB * (1 + len(hb.jobs)):
            raw = hb.model_dump_json().encode()
        self.raw = raw
        self.received = received
        self.node, self.seq, self.time, self.boot = hb.node, hb.seq, hb.time, hb.boot
        self.load = min(1.0, hb.load_cores / hb.capacity_cpus)
        self.pods = tuple([pod_key(j.namespace, j.pod) for j in hb.jobs])
        cats = dict.fromkeys(_CATEGORIES, 0)
        qos: dict[str, int] = {}
        for j in hb.jobs:
            cats[j.category] += 1
            qos[j.qos] = qos.get(j.qos, 0) + 1
        self.categories = cats
        self.qos = qos
        self.cpus = hb.capacity_cpus
        self.work = sum(j.work_s or 0.0 for j in hb.jobs)  # CPU-seconds left, as reported

    @property
    def heartbeat(self) -> Heartbeat:
        return _decode(self.raw)


class NodeTable:
    """What the extender needs of each node, as columns kept up to date at each heartbeat, so
    that a scheduler call is one look-up per node name and a few array operations: the
    SpeCon score of the node's reported jobs (reservations not included), its load (0..1),
    free CPUs, at-risk jobs and when the heartbeat came; and, per row, the node's
    HostPriority already encoded for each score 0..MAX_PRIORITY, so that an answer is gathered
    and joined, not encoded. Row 0 is "no such node" (never fresh, nothing encoded). Not
    locked itself: :class:`ClusterState` holds its lock around writes and reads."""

    def __init__(self, capacity: int = 1024) -> None:
        self.row: dict[str, int] = {}
        self.free_rows: list[int] = []
        self.used = 1
        self.score = np.zeros(capacity)
        self.load = np.zeros(capacity)
        self.free_cpus = np.zeros(capacity)
        self.at_risk = np.zeros(capacity)
        self.received = np.full(capacity, -np.inf)
        self.encoded = np.empty((capacity, MAX_PRIORITY + 1), dtype=object)
        self.added = 0  # rows added since the last _compact()

    def put(self, node: str, received: float, score: float, load: float, free_cpus: float,
            at_risk: int) -> None:
        i = self.row.get(node)
        if i is None:
            i = self.free_rows.pop() if self.free_rows else self._grow()
            self.row[node] = i
            self.encoded[i] = [host_priority(node, k) for k in range(MAX_PRIORITY + 1)]
            self.added += 1
            if self.added * 4 >= len(self.row) + 64:
                self._compact()
        self.score[i], self.load[i], self.free_cpus[i] = score, load, free_cpus
        self.at_risk[i], self.received[i] = at_risk, received

    def _compact(self) -> None:
        """Rebuild :attr:`row` from copies of its keys and values made in one go. Each name
        came with its node's first heartbeat, amid the objects that heartbeat made, so the
        keys a look-up compares lie scattered over the heap; copied together they lie side
        by side, and mapping 5,000 names to rows costs a fifth of what it did when the cache
        is cold (docs/manager.md)."""
        self.added = 0
        keys = list(self.row)
        copies = "\n".join(keys).split("\n")  # new strings, allocated one after the other
        if len(copies) == len(keys):  # (a name with a newline: left as it is)
            self.row = dict(zip(copies, np.fromiter(self.row.values(), np.intp,
                                                    len(keys)).tolist(), strict=True))

    def drop(self, node: str) -> None:
        i = self.row.pop(node, None)
        if i is not None:
            self.received[i] = -np.inf
            self.free_rows.append(i)

    def _grow(self) -> int:
        i = self.used
        if i == len(self.score):
            for name in ("score", "load", "free_cpus", "at_risk"):
                setattr(self, name, np.concatenate([getattr(self, name), np.zeros(i)]))
            self.received = np.concatenate([self.received, np.full(i, -np.inf)])
            self.encoded = np.concatenate([self.encoded, np.empty_like(self.encoded)])
        self.used += 1
        return i

    def rows(self, names: list[str]) -> npt.NDArray[np.intp]:
        # map() over dict.get with a default of row 0 runs in C: ~3x a comprehension.
        return np.fromiter(map(self.row.get, names, itertools.repeat(0, len(names))),
                           dtype=np.intp, count=len(names))

    def encode(self, names: list[str], rows: npt.NDArray[np.intp],
               scores: npt.NDArray[np.int64]) -> bytes:
        """The HostPriorityList ``[{"Host": name, "Score": score}, ...]`` as JSON bytes: the
        rows' encoded items gathered by score (under the state's lock), then the names with
        no row encoded (:func:`finish`, after it)."""
        return finish(names, rows, scores, self.encoded[rows, scores])


def finish(names: list[str], rows: npt.NDArray[np.intp], scores: npt.NDArray[np.int64],
           items: npt.NDArray[np.object_]) -> bytes:
    """The HostPriorityList from the gathered ``items``, the names with no row (row 0) encoded
    here: it reads no table, so it runs outside the lock that heartbeats wait for (a call
    naming thousands of unknown nodes took tens of ms)."""
    for k in np.flatnonzero(rows == 0).tolist():
        items[k] = host_priority(names[k], int(scores[k]))
    return b"[" + b",".join(items.tolist()) + b"]"


@dataclass
class ClusterState:
    """Everything the extender needs, kept current by heartbeats and the controller."""

    stale_after_s: float
    weights: Weights = field(default_factory=Weights)
    #: The policy's placement rule (specon.core.policy): how the extender scores nodes.
    placement: str = "specon"
    clock: Callable[[], float] = time.time
    #: How long after a node's kept heartbeat the agent's boot id and seq may still mark a
    #: heartbeat as late, older than it (:mod:`specon_manager.heartbeat_order`).
    reorder_window_s: float = 5.0
    _nodes: dict[str, NodeRecord] = field(default_factory=dict)
    _where: dict[str, str] = field(default_factory=dict)  # namespace/pod -> reporting node
    _table: NodeTable = field(default_factory=NodeTable)
    _incoming: dict[str, int] = field(default_factory=dict)  # reservations per target
    _reservations: dict[str, Reservation] = field(default_factory=dict)
    _requests: dict[str, dict[str, CheckpointRequest]] = field(default_factory=dict)
    #: Per node, the boot ids of agents replaced within the reorder window, and when.
    _retired: dict[str, Retired] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- heartbeats -----------------------------------------------------------------------------
    def record(self, hb: Heartbeat, raw: bytes | None = None) -> bool:
        """Keep ``hb`` as its node's latest (False: an older one, reordered, is dropped).
        ``raw``: the JSON ``hb`` was validated from, kept as is when it is not padded."""
        now = self.clock()
        rec = NodeRecord(hb, now, raw)
        score = worker_view(hb.node, rec.categories).score(self.weights)
        with self._lock:
            old = self._nodes.get(hb.node)
            if old is not None:
                # A late, reordered heartbeat never replaces a newer one.
                ok, retired = newer(hb, Kept(old.boot, old.seq, old.time, old.received), now,
                                    self.reorder_window_s, self._retired.get(hb.node, ()))
                if retired:
                    self._retired[hb.node] = retired
                else:
                    self._retired.pop(hb.node, None)
                if not ok:
                    return False
                for key in old.pods:
                    if self._where.get(key) == hb.node:
                        del self._where[key]
            for key in rec.pods:
                self._where[key] = hb.node
            self._nodes[hb.node] = rec
            self._table.put(hb.node, now, score, min(1.0, hb.load_cores / hb.capacity_cpus),
                            max(0.0, hb.capacity_cpus - hb.load_cores), rec.qos.get("at-risk", 0))
            return True

    def forget_node(self, node: str) -> None:
        with self._lock:
            self._retired.pop(node, None)
            old = self._nodes.pop(node, None)
            for key in old.pods if old is not None else ():
                if self._where.get(key) == node:
                    del self._where[key]
            self._table.drop(node)

    # -- the extender's look-ups (no per-node objects built) ------------------------------------
    def priorities(self, names: list[str], max_score: int) -> list[int]:
        """The extender's priorities of these nodes for a training pod, positionally (0: no
        fresh heartbeat), by the policy's placement rule (:data:`PLACEMENTS`)."""
        return PLACEMENTS[self.placement](self, names, max_score)

    def _neutral_priorities(self, names: list[str], max_score: int) -> list[int]:
        """Kubernetes' default placement ("spread"): every fresh node alike, so that the
        scheduler's own scoring decides."""
        now = self.clock()
        with self._lock:
            return [max_score if self.is_fresh(n, now) else 0 for n in names]

    def _progress_priorities(self, names: list[str], max_score: int) -> list[int]:
        """The progress-aware placement (specon.core.progress.placement_scores): a typical job
        (the median work left of the jobs reported) placed where it adds the least predicted
        completion, among the least loaded nodes (decoded only those)."""
        now = self.clock()
        with self._lock:
            fresh = {n: self._nodes[n] for n in names if self.is_fresh(n, now)}
        if not fresh:
            return [0] * len(names)
        order = sorted(fresh, key=lambda n: load_key(fresh[n].work, fresh[n].cpus, n))
        nodes = self.node_loads(order[:CANDIDATES])
        works = sorted(j.work for n in nodes for j in n.jobs if j.work > 0)
        typical = works[len(works) // 2] if works else 0.0
        job = reported_load("new", typical, max(fresh[n].cpus for n in fresh))
        scores = placement_scores(nodes, job, self.weights, max_score)
        return [scores.get(n, 1) if n in fresh else 0 for n in names]

    def node_loads(self, names: Iterable[str]) -> list[NodeLoad]:
        """The progress-aware policy's view of these nodes (those with a heartbeat): each job
        with the work left its agent reports (specon.core.progress.reported_load), keyed
        namespace/pod, and a job on its way there (a reserved migration target) as its
        source's agent last reported it, as the simulator counts it."""
        with self._lock:
            incoming: dict[str, list[str]] = {}
            for r in self._reservations.values():
                if r.pod:
                    incoming.setdefault(r.target, []).append(r.pod)
            where = dict(self._where)
        out = []
        for name in names:
            rec = self._nodes.get(name)
            if rec is None:
                continue
            reports = list(rec.heartbeat.jobs)
            for key in incoming.get(name, ()):
                src = self._nodes.get(where.get(key, ""))
                reports += [j for j in (src.heartbeat.jobs if src else ())
                            if pod_key(j.namespace, j.pod) == key]
            jobs = tuple(reported_load(pod_key(j.namespace, j.pod), j.work_s or 0.0, rec.cpus,
                                       j.category, attained=j.work_done_s, cap=j.demand_cores)
                         for j in reports)
            out.append(NodeLoad(name, rec.cpus, 1.0, jobs))
        return out

    def _specon_priorities(self, names: list[str], max_score: int) -> list[int]:
        """Algorithm 4's extender priorities; a reserved migration target counts its incoming
        job as converged."""
        with self._lock:
            return self._table_priorities(self._table.rows(names), False, max_score).tolist()  # type: ignore[no-any-return]

    def qos_priorities(self, names: list[str], max_score: int) -> list[int]:
        """The QoS placement's priorities of these nodes, positionally (0: no fresh heartbeat)."""
        with self._lock:
            return self._table_priorities(self._table.rows(names), True, max_score).tolist()  # type: ignore[no-any-return]

    def _table_priorities(self, rows: npt.NDArray[np.intp], qos: bool,
                          max_score: int = MAX_PRIORITY) -> npt.NDArray[np.int64]:
        """Positional priorities of these rows from the node table alone (0: no fresh
        heartbeat): Algorithm 4's, where a reserved migration target counts its incoming job as
        converged, or with ``qos`` the QoS rule's. Called with the lock held."""
        t = self._table
        fresh = (self.clock() - t.received[rows]) <= self.stale_after_s
        if qos:
            return qos_priorities(t.free_cpus[rows], t.at_risk[rows], fresh, max_score)
        score = t.score[rows]
        for target, count in self._incoming.items():
            row = t.row.get(target)
            if row is not None:
                score[rows == row] += count * self.weights.of(INCOMING)
        return placement_priorities(score, t.load[rows], fresh, max_score)

    def encoded_priorities(self, names: list[str], qos: bool = False) -> bytes:
        """The extender's HostPriorityList (JSON bytes) of these nodes: the QoS rule's with
        ``qos``, else the policy's placement rule's. Algorithm 4's and the QoS rule are read
        from the node table and encoded there, with no per-node objects; another policy's rule
        is run and its scores encoded."""
        t = self._table
        if qos or self.placement == "specon":
            with self._lock:  # rows are reused after forget_node: gather under the lock
                rows = t.rows(names)
                scores = self._table_priorities(rows, qos)
                items = t.encoded[rows, scores]
            return finish(names, rows, scores, items)
        return self.encoded_scores(names, self.priorities(names, MAX_PRIORITY))

    def encoded_scores(self, names: list[str], scores: list[int]) -> bytes:
        """A HostPriorityList of given scores (0..MAX_PRIORITY) for these nodes."""
        t = self._table
        by_row = np.asarray(scores, dtype=np.int64)
        with self._lock:
            rows = t.rows(names)
            items = t.encoded[rows, by_row]
        return finish(names, rows, by_row, items)

    def is_fresh(self, node: str, now: float | None = None) -> bool:
        now = self.clock() if now is None else now
        rec = self._nodes.get(node)
        return rec is not None and now - rec.received <= self.stale_after_s

    def heartbeat(self, node: str) -> Heartbeat | None:
        rec = self._nodes.get(node)
        return None if rec is None else rec.heartbeat

    def nodes(self) -> list[str]:
        with self._lock:
            return sorted(self._nodes)

    def fresh_nodes(self) -> list[str]:
        now = self.clock()
        with self._lock:
            return sorted(n for n in self._nodes if self.is_fresh(n, now))

    def node_counts(self) -> tuple[int, int]:
        """(fresh, stale) nodes."""
        now = self.clock()
        with self._lock:
            fresh = sum(1 for n in self._nodes if self.is_fresh(n, now))
            return fresh, len(self._nodes) - fresh

    def jobs(self, fresh_only: bool = True) -> list[tuple[str, JobReport]]:
        """(node, job) for every job reported by a node (by default: fresh nodes only)."""
        now = self.clock()
        with self._lock:
            return [(n, j) for n, rec in self._nodes.items()
                    if not fresh_only or self.is_fresh(n, now) for j in rec.heartbeat.jobs]

    def find_job(self, namespace: str, pod: str) -> tuple[str, JobReport] | None:
        with self._lock:
            node = self._where.get(pod_key(namespace, pod))
            rec = self._nodes.get(node) if node is not None else None
        if node is None or rec is None:
            return None
        for j in rec.heartbeat.jobs:
            if j.namespace == namespace and j.pod == pod:
                return node, j
        return None

    def job_on(self, node: str, namespace: str, pod: str, uid: str = "") -> JobReport | None:
        """The job as ``node``'s last fresh heartbeat reports it (a report that names another
        pod UID is another pod of the same name, and does not count)."""
        now = self.clock()
        with self._lock:
            rec = self._nodes.get(node)
            if rec is None or not self.is_fresh(node, now):
                return None
            for j in rec.heartbeat.jobs:
                if j.namespace == namespace and j.pod == pod and (
                        not uid or not j.uid or j.uid == uid):
                    return j
        return None

    def category_counts(self) -> dict[Category, int]:
        """Jobs reported by fresh nodes, by category (summed at record time: no decoding)."""
        out = dict.fromkeys(Category, 0)
        now = self.clock()
        with self._lock:
            for n, rec in self._nodes.items():
                if self.is_fresh(n, now):
                    for cat, k in rec.categories.items():
                        out[cat] += k
        return out

    def qos_counts(self) -> dict[str, int]:
        """Jobs reported by fresh nodes, by QoS state (none, on-track, at-risk, ...)."""
        out = dict.fromkeys(QOS_STATES, 0)
        now = self.clock()
        with self._lock:
            for n, rec in self._nodes.items():
                if self.is_fresh(n, now):
                    for state, k in rec.qos.items():
                        out[state] = out.get(state, 0) + k
        return out

    # -- views for Algorithm 4 and the extender ---------------------------------------------------
    def views(self, names: Iterable[str], exclude: frozenset[str] = frozenset()) -> (
        list[WorkerView]
    ):
        """Worker views of these nodes. A node with no fresh heartbeat is unavailable (unknown,
        never idle); a reserved migration target counts its incoming job as converged; pods
        in ``exclude`` (namespace/name) are not counted."""
        now = self.clock()
        out: list[WorkerView] = []
        with self._lock:
            incoming: dict[str, int] = {}
            for r in self._reservations.values():
                incoming[r.target] = incoming.get(r.target, 0) + 1
            for name in names:
                rec = self._nodes.get(name)
                if rec is None or not self.is_fresh(name, now):
                    out.append(WorkerView(name, available=False))
                    continue
                c = rec.categories
                if exclude and not exclude.isdisjoint(rec.pods):
                    # decode only the nodes that report an excluded pod
                    c = dict(c)
                    for j in rec.heartbeat.jobs:
                        if pod_key(j.namespace, j.pod) in exclude:
                            c[j.category] -= 1
                out.append(worker_view(name, c, incoming.get(name, 0), rec.load))
        return out

    # -- reservations ---------------------------------------------------------------------------
    def reserve(self, res: Reservation) -> None:
        with self._lock:
            self._reservations[res.key] = res
            self._recount()

    def release(self, key: str) -> None:
        with self._lock:
            self._reservations.pop(key, None)
            self._recount()

    def _recount(self) -> None:
        incoming: dict[str, int] = {}
        for r in self._reservations.values():
            incoming[r.target] = incoming.get(r.target, 0) + 1
        self._incoming = incoming  # replaced whole: lock-free readers see one or the other

    def source_gone(self, key: str) -> None:
        with self._lock:
            res = self._reservations.get(key)
            if res is not None:
                self._reservations[key] = replace(res, source_present=False)

    def reservation(self, key: str) -> Reservation | None:
        return self._reservations.get(key)

    def reservations(self) -> list[Reservation]:
        with self._lock:
            return list(self._reservations.values())

    # -- checkpoint requests (carried to agents in heartbeat replies) ----------------------------
    def request_checkpoint(self, node: str, req: CheckpointRequest) -> None:
        with self._lock:
            self._requests.setdefault(node, {})[pod_key(req.namespace, req.pod)] = req

    def withdraw_checkpoint(self, node: str, namespace: str, pod: str) -> None:
        with self._lock:
            self._requests.get(node, {}).pop(pod_key(namespace, pod), None)

    def checkpoint_requests(self, node: str) -> list[CheckpointRequest]:
        with self._lock:
            return list(self._requests.get(node, {}).values())


PLACEMENTS.update(spread=ClusterState._neutral_priorities, specon=ClusterState._specon_priorities,
                  progress=ClusterState._progress_priorities)
