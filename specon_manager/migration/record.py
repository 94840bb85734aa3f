"""A migration's record: the JSON annotation (``specon.io/migration``) on the object that holds
the job at that moment, from which a restarted manager resumes or rolls back the move."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from specon import names
from specon_manager.kube import OWNERS, owner_path

A_MIGRATION = names.ANNOTATION_MIGRATION
A_SOURCE_GONE = names.ANNOTATION_SOURCE_GONE
A_MIGRATED = names.ANNOTATION_MIGRATED
A_MIGRATED_AT = names.ANNOTATION_MIGRATED_AT
A_REBALANCED = names.ANNOTATION_REBALANCED
A_MOVE_COST = names.ANNOTATION_MOVE_COST
L_MIGRATING = names.LABEL_MIGRATING
GATE = names.GATE_MIGRATION
PHASES = ("reserved", "checkpointing", "evicting", "placing", "done", "cancelled")
#: converged: Algorithm 4 on a request; rebalance: Algorithm 5; progress: the progress-aware
#: policy's planned move (specon_manager/planner.py), which may move a job more than once.
REASONS = ("converged", "rebalance", "progress")


@dataclass(frozen=True)
class Migration:
    id: str
    namespace: str
    pod: str
    pod_uid: str
    source: str
    target: str
    kind: str  # "pod" (bare), or the owner's kind in lower case: "job", "statefulset", ...
    owner: str  # the owner's name ("" for a bare pod)
    owner_uid: str
    reason: str  # "converged" or "rebalance"
    phase: str
    started: float
    deadline: float  # of the current phase
    replacement: str = ""  # a bare pod's replacement
    reserved: bool = True
    #: When the job was asked to checkpoint (0: not yet, or a record from before this field):
    #: the start of the stop that a completed move's measured cost counts.
    requested: float = 0.0
    #: A planned move's (reason progress) predicted gain in the sum of completion times, net of
    #: the cost it was charged, and that cost (seconds; None: not planned by gain).
    predicted_gain_s: float | None = None
    charged_cost_s: float | None = None
    #: The CPU limit (cores) the job's owner set on ``owner_cpu_container`` when the move
    #: started: a bare pod's replacement gets it when the source's agent no longer reports
    #: it by then (a restarted manager, a gap in heartbeats), instead of the limit an agent
    #: wrote into the source's spec (the fault campaign found one kept for good). None: not
    #: known (the container has none, or a record from before this field).
    owner_cpu_container: str = ""
    owner_cpu_limit: float | None = None

    @property
    def key(self) -> str:
        return f"job/{self.owner_uid}" if self.owned else f"migration/{self.id}"

    @property
    def owned(self) -> bool:
        return self.kind != "pod"

    @property
    def owner_kind(self) -> str:
        return next(k for k in OWNERS if k.lower() == self.kind)

    def owner_path(self) -> str:
        return owner_path(self.owner_kind, self.namespace, self.owner)

    def record(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_record(cls, text: str) -> Migration | None:
        try:
            data = json.loads(text)
            # Fields a newer release added are dropped, not refused (a rollback keeps them in
            # flight); the numbers this release added are checked, the record being writable
            # by whoever may edit the Job.
            data = {k: v for k, v in data.items() if k in _FIELDS}
            for key in _NUMBERS:
                v = data.get(key)
                if (v is None and key == "requested") or (v is not None and (
                        isinstance(v, bool) or not isinstance(v, int | float)
                        or not math.isfinite(v))):
                    data.pop(key, None)
            if not isinstance(data.get("owner_cpu_container", ""), str):
                data.pop("owner_cpu_container")
            cores = data.get("owner_cpu_limit")
            if cores is not None and not 0 < cores <= MAX_CPU_LIMIT:
                data.pop("owner_cpu_limit")
            m = cls(**data)
        except (ValueError, TypeError, AttributeError):
            return None
        kinds = {"pod"} | {k.lower() for k in OWNERS}
        return m if m.phase in PHASES and m.kind in kinds else None


_FIELDS = frozenset(Migration.__dataclass_fields__)
_NUMBERS = ("requested", "predicted_gain_s", "charged_cost_s", "owner_cpu_limit")
#: The largest CPU limit a record may give a replacement (cores; a heartbeat's node bound).
MAX_CPU_LIMIT = 100_000
