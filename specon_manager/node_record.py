"""A node's last heartbeat as the manager keeps it (:class:`NodeRecord`): its JSON, decoded on
demand, and the sums the extender and the metrics read, made at record time."""

from __future__ import annotations

import functools

from specon.core.categorize import Category
from specon.wire import Heartbeat
from specon_manager.job_keys import kind_key, pod_key

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

    __slots__ = ("boot", "categories", "cpus", "kinds", "load", "node", "pods", "qos", "raw",
                 "received", "seq", "time", "work")

    def __init__(self, hb: Heartbeat, received: float, raw: bytes | None = None) -> None:
        if raw is None or len(raw) > RAW_BYTES_PER_JOB * (1 + len(hb.jobs)):
            raw = hb.model_dump_json().encode()
        self.raw = raw
        self.received = received
        self.node, self.seq, self.time, self.boot = hb.node, hb.seq, hb.time, hb.boot
        self.load = min(1.0, hb.load_cores / hb.capacity_cpus)
        self.pods = tuple([pod_key(j.namespace, j.pod) for j in hb.jobs])
        #: Each job kind it reports (job_keys.kind_key), with the pods of that kind.
        kinds: dict[str, list[str]] = {}
        for j in hb.jobs:
            if j.kind is not None:
                kinds.setdefault(kind_key(j.namespace, j.kind), []).append(
                    pod_key(j.namespace, j.pod))
        self.kinds = {k: frozenset(v) for k, v in kinds.items()}
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
