"""The training-side SDK: report progress, checkpoint safely, resume, stop on SIGTERM.

Stdlib only at import time; `TorchCheckpointer` imports torch when it is used.
The contract it implements is docs/training-contract.md."""

from __future__ import annotations

from typing import Any

from specon.sdk.checkpoint import (
    ENV_CHECKPOINT_DIR,
    ENV_CHECKPOINT_EVERY,
    EXIT_STOPPED,
    REQUEST_FILE,
    SAVED_FILE,
    Checkpointer,
    Restored,
    Saved,
    verify_checkpoint,
)
from specon.sdk.progress import ENV_PROGRESS_FILE, Reporter, default_reporter, report
from specon.sdk.threads import THREADS_FILE, ThreadHint

__all__ = [
    "ENV_CHECKPOINT_DIR",
    "ENV_CHECKPOINT_EVERY",
    "ENV_PROGRESS_FILE",
    "EXIT_STOPPED",
    "REQUEST_FILE",
    "SAVED_FILE",
    "THREADS_FILE",
    "Checkpointer",
    "Reporter",
    "Restored",
    "Saved",
    "ThreadHint",
    "TorchCheckpointer",
    "default_reporter",
    "report",
    "verify_checkpoint",
]


def __getattr__(name: str) -> Any:
    # Lazy, so that importing the SDK never imports torch.
    if name == "TorchCheckpointer":
        from specon.sdk.pytorch import TorchCheckpointer

        return TorchCheckpointer
    raise AttributeError(name)
