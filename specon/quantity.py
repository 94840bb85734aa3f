"""Kubernetes CPU quantities, read and written the same way by the agent's resize actuator and
the manager (which copies a pod's spec for a migration)."""

from __future__ import annotations


def parse_cpu(quantity: str | int | float) -> float:
    """Cores from a Kubernetes CPU quantity ("1500m", "2", "0.5"); ValueError when it is not
    one."""
    text = str(quantity).strip()
    if text.endswith("m"):
        return float(text[:-1]) / 1000
    return float(text)


def millicores(cores: float) -> str:
    """The quantity for ``cores``, in millicores (at least 1m)."""
    return f"{max(1, round(cores * 1000))}m"
