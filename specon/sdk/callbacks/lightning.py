"""PyTorch Lightning: ``SpeconCallback`` reports every optimizer step through the SDK and, when
``$SPECON_CHECKPOINT_DIR`` is set, saves on request or SIGTERM (then exits 143) and resumes.

``Trainer(callbacks=[SpeconCallback()])``. Lightning's loop position (``trainer.fit_loop``'s
counters, plain numbers) travels in the checkpoint with the model and the optimizer, so a
resumed run continues at its global step. Uses ``pytorch_lightning``, or ``lightning.pytorch``
when only that one is installed."""

from __future__ import annotations

import math
from typing import Any

from specon.sdk.callbacks import missing, scalar
from specon.sdk.progress import Reporter, default_reporter

try:
    import pytorch_lightning as _pl
except ImportError:
    try:
        import lightning.pytorch as _pl
    except ImportError as exc:
        raise missing("Lightning", "pytorch_lightning (or lightning)", exc) from exc

__all__ = ["SpeconCallback"]


class SpeconCallback(_pl.Callback):  # type: ignore[misc]
    """Reports ``step`` (the trainer's global step), ``loss`` (the training step's output, else
    ``callback_metrics[loss_key]``) and ``total_steps`` (the trainer's estimate) every
    ``every`` steps. ``checkpoint=False`` leaves checkpoints to the caller."""

    def __init__(self, every: int = 1, loss_key: str = "train_loss",
                 reporter: Reporter | None = None, checkpoint: bool = True) -> None:
        super().__init__()
        self.every = max(1, every)
        self.loss_key = loss_key
        self.reporter = reporter if reporter is not None else default_reporter()
        self.checkpoint = checkpoint
        self.checkpointer: Any = None
        self.total: int | None = None
        self._reported = 0

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if not self.checkpoint:
            return
        from specon.sdk.pytorch import TorchCheckpointer

        optimizers = trainer.optimizers
        ckpt = TorchCheckpointer(pl_module, optimizers[0] if len(optimizers) == 1 else None,
                                 extra=lambda: {"fit_loop": trainer.fit_loop.state_dict()},
                                 reporter=self.reporter)
        if not ckpt.enabled:
            return
        self.checkpointer = ckpt
        restored = ckpt.resume()
        if restored is not None and isinstance(ckpt.extra, dict) and "fit_loop" in ckpt.extra:
            # What Lightning itself does with a checkpoint's "loops": the global step, epoch
            # and batch counters continue from the saved ones.
            trainer.fit_loop.load_state_dict(ckpt.extra["fit_loop"])

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        total = trainer.estimated_stepping_batches
        self.total = int(total) if isinstance(total, int | float) and math.isfinite(total) \
            else None

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = int(trainer.global_step)
        if step <= 0:
            return  # no optimizer step yet (gradient accumulation)
        if step % self.every == 0 and step != self._reported:
            self._reported = step
            loss = _loss(outputs)
            if loss is None:
                loss = scalar(trainer.callback_metrics.get(self.loss_key))
            if loss is not None:
                extra = {"total_steps": self.total} if self.total else {}
                self.reporter.report(loss, step=step, epoch=int(trainer.current_epoch), **extra)
        if self.checkpointer is not None:
            self.checkpointer.step_end(step)  # saves when asked; SystemExit(143) on SIGTERM

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.reporter.sync()


def _loss(outputs: Any) -> float | None:
    if isinstance(outputs, dict):
        outputs = outputs.get("loss")
    return scalar(outputs)
