"""The actuator interface: turns a CPU limit decision into a real CFS quota on one container.

Limits are fractions of the node, as in :mod:`specon.core.flowcon`: 1.0 = every CPU of the node,
0.25 on a 4-CPU node = one core. The actuator converts a fraction into a CFS quota with
``quota_us = fraction * node_cpus * period_us``. Subclasses only read and write the quota; this
class holds the careful habits: clamp to the caller's floor, skip a write that changes nothing,
log every change with before and after, order a batch so that decreases go first, remember the
limit found before the first change so that :meth:`Actuator.restore_all` can put it back.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .ledger import Ledger

log = logging.getLogger(__name__)

DEFAULT_PERIOD_US = 100_000
#: The kernel refuses a CFS quota below 1 ms.
MIN_QUOTA_US = 1_000


class ActuatorError(Exception):
    """A limit could not be read or written. ``reason`` is a short, bounded label for metrics."""

    reason = "error"

    def __init__(self, container_id: str, message: str) -> None:
        super().__init__(f"{short_id(container_id)}: {message}")
        self.container_id = container_id


class ContainerGone(ActuatorError):
    """The container (or its cgroup) no longer exists: drop it, it is not a failure to retry."""

    reason = "gone"


class ActuatorUnavailable(ActuatorError):
    """The mechanism itself is missing or refused (engine down, no cpu controller, no rights)."""

    reason = "unavailable"


@dataclass(frozen=True, slots=True)
class CpuLimit:
    """A CFS bandwidth setting: ``quota_us`` per ``period_us``; ``quota_us=None`` is unlimited."""

    quota_us: int | None
    period_us: int = DEFAULT_PERIOD_US

    def same_as(self, other: CpuLimit) -> bool:
        """Equal in effect: two unlimited settings are the same whatever their periods."""
        if self.quota_us is None or other.quota_us is None:
            return self.quota_us is None and other.quota_us is None
        return self == other

    @property
    def cores(self) -> float | None:
        return None if self.quota_us is None else self.quota_us / self.period_us

    def __str__(self) -> str:
        if self.quota_us is None:
            return "unlimited"
        return f"{self.quota_us}/{self.period_us}us ({self.cores:.3f} cores)"


@dataclass(frozen=True, slots=True)
class LimitChange:
    """One write that happened: the limit before and after."""

    container_id: str
    before: CpuLimit
    after: CpuLimit


def short_id(container_id: str) -> str:
    return container_id.split("://", 1)[-1][:12]


def bare_id(container_id: str) -> str:
    """The ID without a runtime prefix (``docker://``, ``containerd://`` in pod status)."""
    return container_id.split("://", 1)[-1]


class Actuator(ABC):
    """Sets a container's CPU limit as a fraction of the node.

    Subclasses implement :meth:`read` and :meth:`_write` (raising :class:`ContainerGone` when the
    container or its cgroup has vanished and :class:`ActuatorError` otherwise).
    """

    name = "abstract"
    #: True for observe mode's actuator: its "writes" change no real limit.
    observing = False

    def __init__(
        self, node_cpus: float, period_us: int = DEFAULT_PERIOD_US, min_step: float = 0.0
    ) -> None:
        """``min_step``: skip a write that moves a quota by less than this fraction of its
        current value (0: only an identical limit is skipped), so noise does not churn limits."""
        if not node_cpus > 0:
            raise ValueError("node_cpus must be > 0")
        if not 1_000 <= period_us <= 1_000_000:
            raise ValueError("period_us must be within [1000, 1000000] (the kernel's range)")
        if not 0 <= min_step < 1:
            raise ValueError("min_step must be within [0, 1)")
        self.node_cpus = node_cpus
        self.period_us = period_us
        self.min_step = min_step
        # The limit each container had before this actuator first changed it, and where the
        # API has it (register); kept on disk too when a ledger is attached.
        self._original: dict[str, CpuLimit] = {}
        self._located: dict[str, tuple[str, str, str]] = {}
        self._ledger: Ledger | None = None

    def attach_ledger(self, ledger: Ledger) -> None:
        """Keep the originals in ``ledger`` from now on, and take the ones it holds (written by
        an earlier run of the agent) as this actuator's: :meth:`restore_all` puts them back."""
        self._ledger = ledger
        for cid, entry in ledger.entries.items():
            self._original.setdefault(cid, entry.original)
            if entry.where is not None:
                self.register(cid, *entry.where)

    def _record(self, container_id: str, original: CpuLimit | None) -> None:
        """Set (None: drop) the original of a container, on disk first when a ledger is kept."""
        if original is None:
            self._original.pop(container_id, None)
            if self._ledger is not None:
                self._ledger.drop(container_id)
            return
        if self._ledger is not None:
            self._ledger.put(container_id, original, self._located.get(container_id))
        self._original[container_id] = original

    @abstractmethod
    def read(self, container_id: str) -> CpuLimit:
        """The container's current CPU limit."""

    @abstractmethod
    def _write(self, container_id: str, before: CpuLimit, after: CpuLimit) -> None:
        """Set the container's CPU limit to ``after`` (its current one is ``before``)."""

    def limit_for(self, fraction: float, floor: float = 0.0) -> CpuLimit:
        """The CFS quota for ``fraction`` of the node, never below ``floor`` (both in [0, 1])."""
        if math.isnan(fraction) or fraction <= 0:
            raise ValueError(f"a limit must be a positive fraction of the node, got {fraction}")
        if math.isnan(floor) or not 0 <= floor <= 1:
            raise ValueError(f"the floor must be a fraction of the node in [0, 1], got {floor}")
        share = min(1.0, max(fraction, floor))
        quota = max(MIN_QUOTA_US, round(share * self.node_cpus * self.period_us))
        return CpuLimit(quota, self.period_us)

    def apply(self, container_id: str, fraction: float, floor: float = 0.0) -> LimitChange | None:
        """Set the limit to ``fraction`` of the node (at least ``floor``).

        Returns the change, or None when the container already had that limit (no write).
        """
        after = self.limit_for(fraction, floor)
        return self._set(container_id, after)

    def apply_many(
        self, fractions: Mapping[str, float], floor: float = 0.0
    ) -> tuple[list[LimitChange], dict[str, ActuatorError]]:
        """Apply a batch, lowering limits before raising any, so the node is never over-promised
        more than needed between writes. One container's failure does not stop the others."""
        targets: dict[str, CpuLimit] = {}
        current: dict[str, CpuLimit] = {}
        failed: dict[str, ActuatorError] = {}
        for cid, fraction in fractions.items():
            targets[cid] = self.limit_for(fraction, floor)
            try:
                current[cid] = self.read(cid)
            except ActuatorError as exc:
                failed[cid] = exc

        def growth(cid: str) -> float:
            before = current[cid].cores
            before = self.node_cpus if before is None else before
            return (targets[cid].cores or 0.0) - before

        changes: list[LimitChange] = []
        for cid in sorted(current, key=growth):
            try:
                change = self._set(cid, targets[cid], current[cid])
            except ActuatorError as exc:
                failed[cid] = exc
                continue
            if change is not None:
                changes.append(change)
        return changes, failed

    def _set(
        self,
        container_id: str,
        after: CpuLimit,
        before: CpuLimit | None = None,
        exact: bool = False,
    ) -> LimitChange | None:
        if before is None:
            before = self.read(container_id)
        if before.same_as(after) or (not exact and self._too_small(before, after)):
            return None
        fresh = container_id not in self._original
        if fresh:
            # Recorded before the write: a crash right after it still knows the owner's limit.
            self._record(container_id, before)
        try:
            self._write(container_id, before, after)
        except ActuatorError:
            if fresh:
                self._record(container_id, None)
            raise
        log.info("%s cpu limit %s: %s -> %s%s", self.name, short_id(container_id), before,
                 after, " (observe mode: not written)" if self.observing else "")
        return LimitChange(container_id, before, after)

    def _too_small(self, before: CpuLimit, after: CpuLimit) -> bool:
        if before.cores is None or after.cores is None:
            return False
        return abs(after.cores - before.cores) < self.min_step * before.cores

    def restore(self, container_id: str) -> LimitChange | None:
        """Put back the limit the container had before this actuator first changed it."""
        original = self._original.get(container_id)
        if original is None:
            return None
        change = self._set(container_id, original, exact=True)
        self._record(container_id, None)
        return change

    def restore_all(
        self, on_change: Callable[[LimitChange], None] | None = None
    ) -> dict[str, ActuatorError]:
        """Restore every container this actuator changed (on shutdown). Never raises for one
        container; a vanished container needs nothing. Returns the failures by container;
        ``on_change`` hears each write."""
        failed: dict[str, ActuatorError] = {}
        for cid in list(self._original):
            try:
                change = self.restore(cid)
                if change is not None and on_change is not None:
                    on_change(change)
            except ContainerGone:
                self._record(cid, None)
            except ActuatorError as exc:
                failed[cid] = exc
        return failed

    def register(self, container_id: str, namespace: str, pod: str, container: str) -> None:
        """Where a container lives in the API (the resize actuator needs it; kept with the
        original so that a restarted agent can find the container again)."""
        self._located[container_id] = (namespace, pod, container)

    def forget(self, container_id: str) -> None:
        """The container has ended: nothing to restore for it."""
        self._record(container_id, None)
        self._located.pop(container_id, None)

    def owner_cores(self, container_id: str) -> float | None:
        """The limit the container's owner set (cores) if this actuator changed it; None when
        unchanged or unlimited."""
        original = self._original.get(container_id)
        return None if original is None else original.cores

    @property
    def changed(self) -> frozenset[str]:
        """The containers whose limit this actuator changed and has not restored."""
        return frozenset(self._original)
