"""Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: the holder renews
``renewTime``; another replica takes over once the record has not changed for a whole lease
duration by its own clock (never by comparing clocks across machines).

The holder counts itself the leader only until its **renew deadline** (shorter than the lease
duration) has passed since its last successful renewal was sent: :meth:`holds`. So a
replica that cannot renew (API server away, a network partition, its process paused) stops
acting before another can take the Lease, and :meth:`check` fences each of the controller's
writes with the same rule (specon_manager.kube.Kube.fenced).

A renewal is one PUT of the Lease as this replica last wrote it (its ``resourceVersion`` makes
it a compare-and-swap); only when that conflicts is the Lease read again. With a slow API
server (seconds a request) a renewal thus costs one round trip, not two. The caller renews on
a thread of its own (specon_manager.service), never behind other work."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from typing import Any

from specon import rfc3339
from specon_manager.kube import FENCED, Kube, KubeError

log = logging.getLogger(__name__)


class LeaseElector:
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str,
                 duration_s: float, clock: Callable[[], float] = time.monotonic,
                 renew_deadline_s: float | None = None) -> None:
        self.kube = kube
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration_s = duration_s
        self.clock = clock
        #: How long after the start of its last successful renewal this replica may act.
        self.renew_deadline_s = renew_deadline_s if renew_deadline_s is not None else (
            duration_s * 2 / 3)
        if not 0 < self.renew_deadline_s < duration_s:
            raise ValueError(f"renew deadline {self.renew_deadline_s} s must be above 0 and "
                             f"below the lease duration {duration_s} s")
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        #: clock() when the write of the last successful acquire or renewal was sent.
        self.renewed_at: float | None = None
        #: The Lease as this replica last wrote it (None: read it first).
        self._written: dict[str, Any] | None = None
        #: Counts the times this replica began to hold the Lease after not holding it (first
        #: acquire, or a renewal after a gap past the renew deadline): what a leader restored
        #: for is stale once this changes.
        self.term = 0

    def holds(self) -> bool:
        """True while the last successful acquire or renewal began less than the renew
        deadline ago: within that time no other replica can have taken the Lease."""
        at = self.renewed_at
        return at is not None and self.clock() - at < self.renew_deadline_s

    def check(self) -> None:
        """Raise KubeError(FENCED) unless :meth:`holds`: the fence of every controller write."""
        if not self.holds():
            raise KubeError(FENCED, "Fenced",
                            f"this replica ({self.identity}) has not renewed the Lease "
                            f"{self.namespace}/{self.name} within its renew deadline "
                            f"({self.renew_deadline_s:g} s): it may no longer write")

    def _spec(self, transitions: int) -> dict[str, Any]:
        now = rfc3339.micro(time.time())
        return {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration_s),
                "acquireTime": now, "renewTime": now, "leaseTransitions": transitions}

    def try_acquire_or_renew(self) -> bool:
        """True when this replica holds the Lease after the call (and :meth:`holds` for the
        renew deadline from when its write was sent, however long the answer took); False
        when another replica holds it. An error leaves the last renewal as it was:
        :meth:`holds` runs out by itself."""
        before = self.renewed_at
        sent = self._try()
        if sent is None:
            self.renewed_at = None
            return False
        if before is None or self.clock() - before >= self.renew_deadline_s:
            self.term += 1  # held again after a gap: a new term
        self.renewed_at = sent
        return True

    def _renew(self) -> float | None:
        """One PUT of the Lease as last written, renewTime now; its send time, or None when the
        Lease changed since (409: read it again)."""
        assert self._written is not None
        lease = copy.deepcopy(self._written)
        lease.setdefault("spec", {})["renewTime"] = rfc3339.micro(time.time())
        sent = self.clock()
        try:
            self._written = self.kube.put(self.path, lease)
        except KubeError as exc:
            if exc.status != 409:
                raise
            self._written = None
            return None
        return sent

    def _try(self) -> float | None:
        """The send time of the write that holds the Lease now, or None: another holds it."""
        if self._written is not None:
            sent = self._renew()
            if sent is not None:
                return sent
        lease = self.kube.get(self.path)
        if lease is None:
            sent = self.clock()
            try:
                self._written = self.kube.create(self.path.rsplit("/", 1)[0], {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(0)})
                return sent
            except KubeError as exc:
                if exc.status == 409:
                    return None
                raise
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        now = self.clock()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        expired = now - self._observed_at > float(spec.get("leaseDurationSeconds")
                                                   or self.duration_s)
        if holder not in ("", self.identity) and not expired:
            return None
        transitions = int(spec.get("leaseTransitions") or 0)
        new_spec = self._spec(transitions if holder == self.identity else transitions + 1)
        if holder == self.identity:
            new_spec["acquireTime"] = spec.get("acquireTime") or new_spec["acquireTime"]
        lease["spec"] = new_spec
        sent = self.clock()
        try:
            # resourceVersion makes this a compare-and-swap
            self._written = self.kube.put(self.path, lease)
        except KubeError as exc:
            if exc.status == 409:
                return None
            raise
        return sent

    def release(self) -> None:
        self.renewed_at = None
        self._written = None
        lease = self.kube.get(self.path)
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        lease["spec"]["holderIdentity"] = ""
        try:
            self.kube.put(self.path, lease)
        except KubeError as exc:
            log.warning("could not release the lease: %s", exc)
