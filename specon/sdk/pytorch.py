"""PyTorch checkpointer: model, optimizer, scheduler, step and every RNG state, so a resumed
job continues bit for bit. torch is imported only when this class is used."""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from specon.sdk.checkpoint import Checkpointer, Restored, Saved, UnsafeCheckpoint
from specon.sdk.tensorfile import RawTensor


def _set_torch_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


class TorchCheckpointer(Checkpointer):
    """Checkpoints a model with its optimizer and scheduler.

    `resume()` loads the state back into them in place and returns the `Restored` record
    (its `.step` is the last completed step); `step_end(step)` needs no state argument."""

    kind = "torch"
    suffix = ".safetensors"

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

    def tensor_out(self, value: Any) -> RawTensor | None:
        import torch

        if not isinstance(value, torch.Tensor):
            return super().tensor_out(value)
        names = _dtype_names()
        if value.dtype not in names:
            raise TypeError(f"a {value.dtype} tensor: the safetensors format has no such dtype")
        t = value.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)  # NumPy has no bfloat16: the same bytes as int16
        array = t.numpy()
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        return RawTensor(names[value.dtype], tuple(value.shape), data)

    def tensor_in(self, raw: RawTensor) -> Any:
        import torch

        dtype = next((d for d, n in _dtype_names().items() if n == raw.dtype), None)
        if dtype is None:
            raise UnsafeCheckpoint(f"dtype {raw.dtype} has no torch {torch.__version__} type")
        if raw.count == 0:
            return torch.empty(raw.shape, dtype=dtype)
        data = bytearray(raw.data)  # a copy the tensor owns (frombuffer shares it)
        if dtype == torch.bool and data.strip(b"\x00\x01"):
            raise UnsafeCheckpoint("a BOOL tensor holds bytes other than 0 and 1")
        if sys.byteorder != "little":
            raise UnsafeCheckpoint("this SDK reads tensors on little-endian machines only")
        return torch.frombuffer(data, dtype=dtype).reshape(raw.shape)

    def state(self, step: int) -> dict[str, Any]:
        import torch

        rng: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            # As plain data (no NumPy arrays in a checkpoint): (name, key list, pos, ...).
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


def _dtype_names() -> dict[Any, str]:
    """torch dtype -> the safetensors dtype name, for the dtypes both have."""
    import torch

    return {
        torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16",
        torch.int32: "I32", torch.int64: "I64", torch.float16: "F16", torch.bfloat16: "BF16",
        torch.float32: "F32", torch.float64: "F64",
    }
