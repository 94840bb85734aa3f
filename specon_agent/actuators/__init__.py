"""Actuators: set a container's CPU limit (a fraction of the node) through one interface.

``docker`` (Docker Engine API) and ``cgroup`` (direct v1/v2 writes); :func:`create` picks one by
its configured name.
"""

from __future__ import annotations

from typing import Any

from .base import (
    Actuator,
    ActuatorError,
    ActuatorUnavailable,
    ContainerGone,
    CpuLimit,
    LimitChange,
)

__all__ = [
    "Actuator",
    "ActuatorError",
    "ActuatorUnavailable",
    "ContainerGone",
    "CpuLimit",
    "LimitChange",
    "create",
]

KINDS = ("docker", "cgroup")


def create(kind: str, **options: Any) -> Actuator:
    """The actuator named ``kind`` (``docker`` or ``cgroup``), built with ``options``."""
    if kind == "docker":
        from .docker import DockerActuator

        return DockerActuator(**options)
    if kind == "cgroup":
        from .cgroup import CgroupActuator

        return CgroupActuator(**options)
    raise ValueError(f"unknown actuator {kind!r}: choose one of {', '.join(KINDS)}")
