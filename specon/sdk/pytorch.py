"""PyTorch checkpointer: model, optimizer, scheduler, step and every RNG state, so a resumed
job continues bit for bit. torch is imported only when this class is used."""

from __future__ import annotations

import dataclasses
import io
import pickle
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from specon.sdk.checkpoint import Checkpointer, Restored, Saved, UnsafeCheckpoint


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

        # Two parts, neither able to carry code on load: the tensors (torch.save of a list,
        # loaded with weights_only=True) and everything else as plain data (loaded by the
        # base class's plain-data unpickler); tensors are named by their index in the list.
        tensors: list[Any] = []
        plain = _split(state, tensors, torch.Tensor)
        head = super().serialize(plain)
        buffer = io.BytesIO()
        torch.save(tensors, buffer)
        return len(head).to_bytes(8, "big") + head + buffer.getvalue()

    def deserialize(self, data: bytes) -> Any:
        import torch

        n = int.from_bytes(data[:8], "big")
        plain = super().deserialize(data[8:8 + n])
        try:
            tensors = torch.load(io.BytesIO(data[8 + n:]), map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            raise UnsafeCheckpoint(f"not tensors only: {exc}") from exc
        if not isinstance(tensors, list):
            raise UnsafeCheckpoint("the tensor part is not a list of tensors")
        return _join(plain, tensors)

    def state(self, step: int) -> dict[str, Any]:
        import torch

        rng: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            # As plain data (weights_only loads no numpy arrays): (name, key list, pos, ...).
            name, keys, *rest = numpy.random.get_state()
            rng["numpy"] = (name, [int(k) for k in keys], *rest)
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
            name, keys, *rest = rng["numpy"]
            numpy.random.set_state((name, numpy.asarray(keys, dtype=numpy.uint32), *rest))
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


_TENSOR = "__specon_tensor__"


def _split(obj: Any, tensors: list[Any], tensor_type: type) -> Any:
    """``obj`` with every tensor replaced by ``(_TENSOR, index)`` and appended to ``tensors``;
    OrderedDicts become dicts (plain data; ``load_state_dict`` takes either)."""
    if isinstance(obj, tensor_type):
        tensors.append(obj)
        return (_TENSOR, len(tensors) - 1)
    if isinstance(obj, dict):
        return {k: _split(v, tensors, tensor_type) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_split(v, tensors, tensor_type) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_split(v, tensors, tensor_type) for v in obj)
    return obj


def _join(obj: Any, tensors: list[Any]) -> Any:
    if isinstance(obj, tuple) and len(obj) == 2 and obj[0] == _TENSOR:
        return tensors[obj[1]]
    if isinstance(obj, dict):
        return {k: _join(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_join(v, tensors) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_join(v, tensors) for v in obj)
    return obj
