"""Observe mode's actuator: every decision is computed as when enforcing, and none is written.

:class:`ObserveActuator` wraps the configured actuator (docker, cgroup, resize) and keeps the
limits the agent *would* set in memory: a container's limit reads as the would-be one once the
agent decided one, and as the real one before; nothing reaches a cgroup, the engine or the API
server. The agent tells each would-be change as a ``WouldLimitCPU`` Event and its
``specon_agent_job_would_cpu_limit_cores`` gauge (docs/agent.md, "Observe mode").
"""

from __future__ import annotations

from collections.abc import Callable

from .base import Actuator, ActuatorError, CpuLimit, LimitChange


class ObserveActuator(Actuator):
    """Reads through ``inner``; "writes" only to memory. Restoring is forgetting: no real
    limit was changed, so there is nothing to put back."""

    observing = True

    def __init__(self, inner: Actuator) -> None:
        super().__init__(inner.node_cpus, inner.period_us, inner.min_step)
        self.inner = inner
        self.name = inner.name  # the mechanism the cluster would be throttled by
        self._would: dict[str, CpuLimit] = {}

    def read(self, container_id: str) -> CpuLimit:
        would = self._would.get(container_id)
        # The real read also tells a vanished container (ContainerGone) as when enforcing.
        real = self.inner.read(container_id)
        return real if would is None else would

    def _write(self, container_id: str, before: CpuLimit, after: CpuLimit) -> None:
        self._would[container_id] = after

    def register(self, container_id: str, namespace: str, pod: str, container: str) -> None:
        super().register(container_id, namespace, pod, container)
        self.inner.register(container_id, namespace, pod, container)

    def forget(self, container_id: str) -> None:
        super().forget(container_id)
        self._would.pop(container_id, None)
        self.inner.forget(container_id)

    def restore_all(
        self, on_change: Callable[[LimitChange], None] | None = None
    ) -> dict[str, ActuatorError]:
        """Nothing was written: forget the would-be limits (``on_change`` hears nothing)."""
        for cid in list(self._original):
            self._record(cid, None)
        self._would.clear()
        return {}
