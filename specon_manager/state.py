"""The manager's live view: each worker's last heartbeat, the reservations of migrations in
flight and the checkpoint requests waiting for agents. Thread-safe; no I/O. What it is built
from: the kept heartbeats (:mod:`specon_manager.node_record`), the extender's columns
(:mod:`specon_manager.node_table`) and the keys pods and jobs are filed under
(:mod:`specon_manager.job_keys`)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from specon.core.categorize import Category
from specon.core.job_loads import new_job_load, reported_load
from specon.core.placement import placement_scores
from specon.core.progress import (
    CANDIDATES,
    KIND_NODES,
    JobLoad,
    NodeLoad,
    load_key,
)
from specon.core.qos_rules import qos_priorities
from specon.core.scoring import (
    INCOMING,
    Weights,
    WorkerView,
    placement_priorities,
    worker_view,
)
from specon.cpu_speed import DEFAULT_SPEED, MAX_SPEED, MIN_SPEED
from specon.wire import QOS_STATES, CheckpointRequest, Heartbeat, JobReport
from specon_manager.heartbeat_order import Kept, Retired, newer

# Re-exported: specon_manager.migration still imports these two from here.
from specon_manager.job_keys import ANNOTATION_MIGRATION_ID as ANNOTATION_MIGRATION_ID
from specon_manager.job_keys import pod_key as pod_key
from specon_manager.node_record import NodeRecord
from specon_manager.node_speed import measured_scale
from specon_manager.node_table import MAX_PRIORITY, NodeTable, finish

#: How often the measured speeds' scale is taken again (one pass over the nodes' labels).
SCALE_EVERY_S = 10.0
#: The placement rules the extender runs, by name (a policy's ``placement``).
PLACEMENTS: dict[str, Callable[[ClusterState, list[str], int, str | None, bool], list[int]]] = {}


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
    #: A node's per-core speed (specon_manager.node_speed: its specon.io/cpu-speed label), None
    #: without one or without a node cache (then taken as DEFAULT_SPEED).
    node_speed: Callable[[str], float | None] = field(default=lambda _name: None)
    _nodes: dict[str, NodeRecord] = field(default_factory=dict)
    _where: dict[str, str] = field(default_factory=dict)  # namespace/pod -> reporting node
    _table: NodeTable = field(default_factory=NodeTable)
    _incoming: dict[str, int] = field(default_factory=dict)  # reservations per target
    _reservations: dict[str, Reservation] = field(default_factory=dict)
    _requests: dict[str, dict[str, CheckpointRequest]] = field(default_factory=dict)
    #: Per node, the boot ids of agents replaced within the reorder window, and when.
    _retired: dict[str, Retired] = field(default_factory=dict)
    #: Per job kind in its namespace (job_keys.kind_key), the nodes whose kept heartbeat
    #: reports a job of it.
    _kinds: dict[str, set[str]] = field(default_factory=dict)
    #: When the measured speeds' scale was last taken, and the scale (:meth:`known_speed`).
    _scale: tuple[float, float | None] = (-math.inf, None)
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
            self._index_kinds(hb.node, old.kinds.keys() if old is not None else set(),
                              rec.kinds.keys())
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
            if old is not None:
                self._index_kinds(node, old.kinds.keys(), set())
            self._table.drop(node)

    def _index_kinds(self, node: str, old: AbstractSet[str], new: AbstractSet[str]) -> None:
        """Keep :attr:`_kinds` (under the lock) as ``node``'s reported kinds go from ``old``
        to ``new``."""
        for kind in old - new:
            hosts = self._kinds.get(kind)
            if hosts is not None:
                hosts.discard(node)
                if not hosts:
                    del self._kinds[kind]
        for kind in new - old:
            self._kinds.setdefault(kind, set()).add(node)

    # -- the extender's look-ups (no per-node objects built) ------------------------------------
    def priorities(self, names: list[str], max_score: int, kind: str | None = None,
                   movable: bool = True) -> list[int]:
        """The extender's priorities of these nodes for a training pod of ``kind`` (a
        :func:`~specon_manager.job_keys.kind_key`; None: not known) that can be moved later
        or not (its ``specon.io/migratable`` label), positionally (0: no fresh heartbeat), by
        the policy's placement rule (:data:`PLACEMENTS`)."""
        return PLACEMENTS[self.placement](self, names, max_score, kind, movable)

    def _neutral_priorities(self, names: list[str], max_score: int,
                            kind: str | None = None, movable: bool = True) -> list[int]:
        """Kubernetes' default placement ("spread"): every fresh node alike, so that the
        scheduler's own scoring decides."""
        del kind, movable
        now = self.clock()
        with self._lock:
            return [max_score if self.is_fresh(n, now) else 0 for n in names]

    def _progress_priorities(self, names: list[str], max_score: int,
                             kind: str | None = None, movable: bool = True) -> list[int]:
        """The progress-aware placement (specon.core.placement.placement_scores): the new pod
        placed where it adds the least predicted completion among the least loaded nodes
        (decoded only those), taken as the typical job of its kind where every one of those
        nodes' speed is known (labelled, or measured by its agent) and jobs of that kind are
        reported, else as the typical job of those nodes (specon.core.job_loads.new_job_load:
        the median work left of the jobs reported and, speeds known, the median cores they
        use). A pod that cannot be moved is kept off nodes where it would be slow were it one
        thread (specon.core.placement.SERIAL_TIME_BOUND)."""
        now = self.clock()
        with self._lock:
            fresh = {n: self._nodes[n] for n in names if self.is_fresh(n, now)}
        if not fresh:
            return [0] * len(names)
        # work / cpus is the backlog with speeds too: both scale by the node's speed
        order = sorted(fresh, key=lambda n: load_key(fresh[n].work, fresh[n].cpus, n))
        nodes = self.node_loads(order[:CANDIDATES])
        known = all(self.known_speed(n.name) is not None for n in nodes)
        same = self._kind_jobs(kind, now) if known and kind is not None else []
        job = replace(new_job_load(same, nodes, max(fresh[n].cpus for n in fresh),
                                   by_cores=known), movable=movable)
        scores = placement_scores(nodes, job, self.weights, max_score)
        return [scores.get(n, 1) if n in fresh else 0 for n in names]

    def node_loads(self, names: Iterable[str]) -> list[NodeLoad]:
        """The progress-aware policy's view of these nodes (those with a heartbeat): each job
        with the work left its agent reports (specon.core.job_loads.reported_load), keyed
        namespace/pod, and a job on its way there (a reserved migration target) as its
        source's agent last reported it, as the simulator counts it. Work is in CPU-seconds
        of a speed-1 core: an agent's figures (CPU-seconds of its node) times the node's
        speed (:attr:`node_speed`); a job on its way in, times its source's."""
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
            speed = self._speed(name)
            reports = [(j, speed) for j in rec.heartbeat.jobs]
            for key in incoming.get(name, ()):
                source = where.get(key, "")
                src = self._nodes.get(source)
                reports += [(j, self._speed(source)) for j in
                            (src.heartbeat.jobs if src else ())
                            if pod_key(j.namespace, j.pod) == key]
            jobs = tuple(reported_load(pod_key(j.namespace, j.pod), (j.work_s or 0.0) * s,
                                       rec.cpus, j.category, cap=j.demand_cores,
                                       attained=None if j.work_done_s is None
                                       else j.work_done_s * s,
                                       guessed=j.total_steps is None)
                         for j, s in reports)
            out.append(NodeLoad(name, rec.cpus, speed, jobs))
        return out

    def _kind_jobs(self, kind: str, now: float) -> list[JobLoad]:
        """The reported jobs of ``kind`` (a kind_key) on at most KIND_NODES fresh nodes, as
        :meth:`node_loads` gives them."""
        with self._lock:
            hosts = [n for n in self._kinds.get(kind, ()) if self.is_fresh(n, now)][:KIND_NODES]
            keys = frozenset().union(*(self._nodes[n].kinds[kind] for n in hosts))
        return [j for n in self.node_loads(hosts) for j in n.jobs if j.name in keys]

    def known_speed(self, node: str) -> float | None:
        """A node's per-core speed: its ``specon.io/cpu-speed`` label (:attr:`node_speed`),
        else what its agent measured (``Heartbeat.cpu_speed``) on the labels' scale
        (specon_manager.node_speed.measured_scale, taken again every SCALE_EVERY_S), else
        None."""
        speed = self.node_speed(node)
        if speed is not None:
            return speed
        rec = self._nodes.get(node)
        measured = None if rec is None else rec.heartbeat.cpu_speed
        if measured is None:
            return None
        scale = self._measured_scale()
        return None if scale is None else min(MAX_SPEED, max(MIN_SPEED, measured * scale))

    def _measured_scale(self) -> float | None:
        now = self.clock()
        at, scale = self._scale
        if not 0 <= now - at < SCALE_EVERY_S:
            with self._lock:
                measured = [(n, r.heartbeat.cpu_speed) for n, r in self._nodes.items()]
            scale = measured_scale((self.node_speed(n), m) for n, m in measured)
            self._scale = (now, scale)
        return scale

    def _speed(self, node: str) -> float:
        speed = self.known_speed(node)
        return DEFAULT_SPEED if speed is None else speed

    def _specon_priorities(self, names: list[str], max_score: int,
                           kind: str | None = None, movable: bool = True) -> list[int]:
        """Algorithm 4's extender priorities; a reserved migration target counts its incoming
        job as converged."""
        del kind, movable
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

    def encoded_priorities(self, names: list[str], qos: bool = False,
                           kind: str | None = None, movable: bool = True) -> bytes:
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
        return self.encoded_scores(names, self.priorities(names, MAX_PRIORITY, kind, movable))

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
