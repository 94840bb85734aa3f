"""Keras: ``SpeconCallback`` reports every training batch through the SDK and, when
``$SPECON_CHECKPOINT_DIR`` is set, saves the model's and optimizer's variables on request or
SIGTERM (then exits 143), in the SDK's format (safetensors, never pickle).

``model.fit(..., callbacks=[SpeconCallback()])``. To resume, ask the callback before ``fit``::

    cb = SpeconCallback()
    initial_epoch = cb.resume(model)   # 0 on a fresh start; loads the variables otherwise
    model.fit(x, y, epochs=E, initial_epoch=initial_epoch, callbacks=[cb])

Keras 3 (``keras``), else tf.keras (``tensorflow.keras``). Checked against Keras's documented
callback sequence with plain objects (tests/sdk/test_callbacks.py), not a real Keras: this
repository's tests install no Keras backend."""

from __future__ import annotations

from specon.sdk.callbacks import missing
from specon.sdk.callbacks._keras import ArrayCheckpointer, build

__all__ = ["ArrayCheckpointer", "SpeconCallback", "build"]


def _base() -> type:
    try:
        import keras
    except ImportError:
        try:
            from tensorflow import keras
        except ImportError as exc:
            raise missing("Keras", "keras (or tensorflow)", exc) from exc
    return keras.callbacks.Callback  # type: ignore[no-any-return]


SpeconCallback = build(_base())
