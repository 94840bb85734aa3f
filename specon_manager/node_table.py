"""The extender's node table: what a scheduler call needs of each node, as columns kept up to
date at each heartbeat, with each node's HostPriority encoded in advance, and the
HostPriorityList an answer is joined from."""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import orjson

#: kube-scheduler's extender priorities run 0..10 (extenderv1.MaxExtenderPriority).
MAX_PRIORITY = 10


def host_priority(name: str, score: int) -> bytes:
    """One HostPriority of the extender's wire, ``{"Host":"<name>","Score":<score>}``."""
    return b'{"Host":' + orjson.dumps(name) + b',"Score":' + str(score).encode() + b"}"


class NodeTable:
    """What the extender needs of each node, as columns kept up to date at each heartbeat, so
    that a scheduler call is one look-up per node name and a few array operations: the
    SpeCon score of the node's reported jobs (reservations not included), its load (0..1),
    free CPUs, at-risk jobs and when the heartbeat came; and, per row, the node's
    HostPriority already encoded for each score 0..MAX_PRIORITY, so that an answer is gathered
    and joined, not encoded. Row 0 is "no such node" (never fresh, nothing encoded). Not
    locked itself: :class:`specon_manager.state.ClusterState` holds its lock around writes
    and reads."""

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
