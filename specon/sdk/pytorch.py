"""PyTorch checkpointer: model, optimizer, scheduler, step and every RNG state, so a resumed
job continues bit for bit. torch is imported only when this class is used."""

from __future__ import annotations

import dataclasses
import io
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from specon.sdk.checkpoint import Checkpointer, Restored, Saved


def _set_torch_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


class TorchCheckpointer(Checkpointer):
    """Checkpoints a model with its optimizer and scheduler.

    `resume()` loads the state back into them in place and returns the `Restored` record
    (its `.step` is the last completed step); `step_end(step)` needs no state argument."""

    kind = "torch"
    suffix = ".pt"

    def __init__(
        self,
        model: Any,
        optimizer: Any = None,
        scheduler: Any = None,
        *,
        extra: Callable[[], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("on_threads", _set_torch_threads)
        super().__init__(**kwargs)
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self._extra = extra
        self.extra: Any = None

    def serialize(self, state: Any) -> bytes:
        import torch

        buffer = io.BytesIO()
        torch.save(state, buffer)
        return buffer.getvalue()

    def deserialize(self, data: bytes) -> Any:
        import torch

        buffer = io.BytesIO(data)
        try:
            # Our own verified file (checksum in the manifest): full unpickling is intended.
            return torch.load(buffer, map_location="cpu", weights_only=False)
        except TypeError:  # torch < 1.13 has no weights_only
            buffer.seek(0)
            return torch.load(buffer, map_location="cpu")

    def state(self, step: int) -> dict[str, Any]:
        import torch

        rng: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            rng["numpy"] = numpy.random.get_state()
        return {
            "step": step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "rng": rng,
            "extra": self._extra() if self._extra is not None else None,
        }

    def apply(self, state: dict[str, Any]) -> None:
        import torch

        self.model.load_state_dict(state["model"])
        if self.optimizer is not None and state.get("optimizer") is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        rng = state.get("rng") or {}
        if "torch" in rng:
            torch.set_rng_state(rng["torch"])
        if "python" in rng:
            random.setstate(rng["python"])
        numpy = sys.modules.get("numpy")
        if numpy is not None and "numpy" in rng:
            numpy.random.set_state(rng["numpy"])
        self.extra = state.get("extra")

    def resume(self) -> Restored | None:
        start = time.perf_counter()
        restored = self.load()
        if restored is None:
            return None
        self.apply(restored.state)
        restored = dataclasses.replace(restored, seconds=time.perf_counter() - start)
        self._announce(restored)
        return restored

    def save_now(self, step: int, reason: str = "manual") -> Saved | None:
        return self.save(self.state(step), step, reason=reason)

    def step_end(self, step: int, state: Any = None) -> Saved | None:
        return super().step_end(step, state if state is not None else lambda: self.state(step))
