"""Actuators: set a container's CPU limit (a fraction of the node) through one interface.

``docker`` (Docker Engine API), ``cgroup`` (direct v1/v2 writes) and ``resize`` (Kubernetes
in-place pod resize through the API server); :func:`create` picks one by its configured name.
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

KINDS = ("docker", "cgroup", "resize")


def create(kind: str, **options: Any) -> Actuator:
    """The actuator named ``kind`` (one of :data:`KINDS`), built with ``options``."""
    if kind == "docker":
        from .docker import DockerActuator

        return DockerActuator(**options)
    if kind == "cgroup":
        from .cgroup import CgroupActuator

        return CgroupActuator(**options)
    if kind == "resize":
        from .resize import ResizeActuator

        return ResizeActuator(**options)
    raise ValueError(f"unknown actuator {kind!r}: choose one of {', '.join(KINDS)}")
