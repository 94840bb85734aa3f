"""The Keras callback over any base class (specon.sdk.callbacks.keras builds it over Keras's
``Callback``): importable without Keras, for tests that drive it with plain objects."""

from __future__ import annotations

from typing import Any

from specon.sdk.callbacks import scalar
from specon.sdk.checkpoint import Checkpointer, Restored
from specon.sdk.progress import Reporter, default_reporter
from specon.sdk.tensorfile import RawTensor


class ArrayCheckpointer(Checkpointer):
    """Checkpoints whose tensors are NumPy arrays (what Keras's variables give)."""

    kind = "numpy"

    def tensor_out(self, value: Any) -> RawTensor | None:
        import numpy

        if not isinstance(value, numpy.ndarray):
            return super().tensor_out(value)
        names = {"float16": "F16", "float32": "F32", "float64": "F64", "int8": "I8",
                 "int16": "I16", "int32": "I32", "int64": "I64", "uint8": "U8", "bool": "BOOL"}
        name = names.get(value.dtype.name)
        if name is None:
            raise TypeError(f"a {value.dtype} array: the safetensors format has no such dtype")
        little = value.astype(value.dtype.newbyteorder("<"), copy=False)
        return RawTensor(name, tuple(value.shape), numpy.ascontiguousarray(little).tobytes())

    def tensor_in(self, raw: RawTensor) -> Any:
        import numpy

        dtypes = {"F16": "<f2", "F32": "<f4", "F64": "<f8", "I8": "i1", "I16": "<i2",
                  "I32": "<i4", "I64": "<i8", "U8": "u1", "BOOL": "?"}
        return numpy.frombuffer(bytes(raw.data), dtype=dtypes[raw.dtype]).reshape(raw.shape)


def _values(variables: Any) -> list[Any]:
    import numpy

    return [numpy.asarray(v) for v in variables]


def build(base: type) -> type:
    """The callback class over ``base`` (``keras.callbacks.Callback``)."""

    class SpeconCallback(base):  # type: ignore[misc]
        """Reports ``step`` (batches completed over all epochs), ``loss`` (``logs["loss"]``)
        and ``total_steps`` (``params["epochs"] * params["steps"]``) every ``every`` batches;
        ``checkpoint=False`` leaves checkpoints out."""

        def __init__(self, every: int = 1, reporter: Reporter | None = None,
                     checkpoint: bool = True) -> None:
            super().__init__()
            self.every = max(1, every)
            self.reporter = reporter if reporter is not None else default_reporter()
            self.checkpointer = ArrayCheckpointer(reporter=self.reporter) if checkpoint \
                else None
            self.step = 0
            self.epoch = 0
            self.restored: Restored | None = None

        def resume(self, model: Any) -> int:
            """Load the last good checkpoint into ``model``; the epoch ``fit`` starts at."""
            if self.checkpointer is None or not self.checkpointer.enabled:
                return 0
            self.restored = self.checkpointer.resume()
            if self.restored is None:
                return 0
            state = self.restored.state
            model.set_weights(list(state["weights"]))
            optimizer = getattr(model, "optimizer", None)
            saved = state.get("optimizer") or []
            if optimizer is not None and saved:
                if hasattr(optimizer, "build") and not optimizer.variables:
                    optimizer.build(model.trainable_variables)
                for variable, value in zip(optimizer.variables, saved, strict=True):
                    variable.assign(value)
            self.step = int(state["step"])
            return int(state["epoch"])  # a mid-epoch save: that epoch runs again

        def _state(self) -> dict[str, Any]:
            optimizer = getattr(self.model, "optimizer", None)
            return {"step": self.step, "epoch": self.epoch,
                    "weights": _values(self.model.get_weights()),
                    "optimizer": _values(optimizer.variables) if optimizer is not None else []}

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = int(epoch)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.step += 1
            loss = scalar((logs or {}).get("loss"))
            if loss is not None and self.step % self.every == 0:
                params = getattr(self, "params", None) or {}
                epochs, steps = params.get("epochs"), params.get("steps")
                extra = {"total_steps": int(epochs) * int(steps)} if epochs and steps else {}
                self.reporter.report(loss, step=self.step, epoch=self.epoch, **extra)
            if self.checkpointer is not None:
                self.checkpointer.step_end(self.step, self._state)

        def on_train_end(self, logs: Any = None) -> None:
            self.reporter.sync()

    return SpeconCallback

