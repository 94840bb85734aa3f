"""Callbacks that connect a framework's training loop to the SDK: each reports step, loss and
total steps through :mod:`specon.sdk.progress`, and takes part in checkpoints when given a
checkpointer (docs/training-contract.md, "Callbacks").

Import the module of your framework (``specon.sdk.callbacks.lightning``, ``.keras``, ``.hf``):
this package imports none of them, and each says once, clearly, when its framework is missing."""

from __future__ import annotations

from typing import Any


def missing(framework: str, package: str, exc: ImportError) -> ImportError:
    """The one error a callback module raises when its framework is not installed."""
    return ImportError(f"specon.sdk.callbacks: the {framework} callback needs {package} "
                       f"installed in this environment ({exc})")


def scalar(value: Any) -> float | None:
    """A loss as a float: a number, a 0-d tensor or array; None when it is not one."""
    if value is None:
        return None
    try:
        if hasattr(value, "detach"):
            value = value.detach()
        if hasattr(value, "item"):
            value = value.item()
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        return None
