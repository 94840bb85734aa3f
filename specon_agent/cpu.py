"""Real CPU use of a container: its cgroup's cumulative CPU counter, or the engine's stats when
the agent cannot see the cgroup. Growth efficiency divides by this, never by an estimate."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from .actuators import ActuatorError, ContainerGone
from .actuators.cgroup import CgroupActuator

log = logging.getLogger(__name__)


class CpuMeter:
    """``usage_ns(cid)``: the container's total CPU time so far in ns, None when unknown;
    ``wait_ns(cid)``: how long it waited for a CPU so far."""

    def __init__(self, cgroup_root: Path | None = None, docker_client: Any = None) -> None:
        self._cgroup: CgroupActuator | None
        try:
            self._cgroup = CgroupActuator(root=cgroup_root)
        except (OSError, ValueError, ActuatorError) as exc:
            log.warning("no cgroup hierarchy readable (%s); CPU use from the engine's stats", exc)
            self._cgroup = None
        self._docker = docker_client
        self.source = "cgroup" if self._cgroup is not None else "engine"

    def usage_ns(self, cid: str) -> int | None:
        if self._cgroup is not None:
            try:
                return self._cgroup.cpu_usage_ns(cid)
            except ContainerGone:
                pass  # another layout or a vanished container: the engine may still say
            except (ActuatorError, ValueError, OSError) as exc:
                log.debug("cgroup CPU counter of %s: %s", cid[:12], exc)
        if self._docker is not None:
            try:
                stats = self._docker.api.stats(cid, stream=False, one_shot=True)
                return int(stats["cpu_stats"]["cpu_usage"]["total_usage"])
            except Exception as exc:  # the engine away or the container gone: unknown
                log.debug("engine stats of %s: %s", cid[:12], exc)
        return None

    def wait_ns(self, cid: str) -> int | None:
        """How long some thread of the container has waited for a CPU so far, in ns (its
        cgroup's PSI ``cpu.pressure``), None when unknown (no PSI, or no cgroup readable)."""
        if self._cgroup is None:
            return None
        try:
            return self._cgroup.cpu_wait_ns(cid)
        except (ActuatorError, ValueError, OSError) as exc:
            log.debug("cgroup CPU pressure of %s: %s", cid[:12], exc)
            return None

    def forget(self, cid: str) -> None:
        if self._cgroup is not None:
            self._cgroup.forget(cid)
