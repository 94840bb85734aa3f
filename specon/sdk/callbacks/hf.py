"""Hugging Face ``transformers``: ``SpeconCallback`` reports each logged training loss through
the SDK and, when ``$SPECON_CHECKPOINT_DIR`` is set, saves on request or SIGTERM (then exits
143) and resumes, with the SDK's checkpoints (safetensors, never pickle) beside the Trainer's.

``Trainer(..., callbacks=[SpeconCallback()])``. The Trainer logs the loss every
``logging_steps`` (500 by default): set ``logging_steps=1`` for a record every step. A resume
restores model, optimizer, scheduler and RNG states and the global step; the Trainer's data
order starts its epoch again (as with its own ``resume_from_checkpoint`` without data skipping)."""

from __future__ import annotations

from typing import Any

from specon.sdk.callbacks import missing, scalar
from specon.sdk.progress import Reporter, default_reporter


def _base() -> type:
    try:
        from transformers import TrainerCallback
    except ImportError as exc:
        raise missing("Hugging Face", "transformers", exc) from exc
    return TrainerCallback  # type: ignore[no-any-return]


def build(base: type) -> type:
    """The callback class over ``base`` (transformers' ``TrainerCallback``)."""

    class SpeconCallback(base):  # type: ignore[misc]
        """Reports ``step`` (``state.global_step``), ``loss`` (``logs["loss"]``) and
        ``total_steps`` (``state.max_steps``); ``checkpoint=False`` leaves checkpoints out."""

        def __init__(self, reporter: Reporter | None = None, checkpoint: bool = True) -> None:
            self.reporter = reporter if reporter is not None else default_reporter()
            self.checkpoint = checkpoint
            self.checkpointer: Any = None
            self._resumed_at = 0

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                           optimizer: Any = None, lr_scheduler: Any = None,
                           **kwargs: Any) -> None:
            if not self.checkpoint or model is None:
                return
            from specon.sdk.pytorch import TorchCheckpointer

            ckpt = TorchCheckpointer(model, optimizer, lr_scheduler, reporter=self.reporter)
            if not ckpt.enabled:
                return
            self.checkpointer = ckpt
            restored = ckpt.resume()
            if restored is not None:
                # The Trainer counts on from here and stops at max_steps.
                state.global_step = self._resumed_at = restored.step

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None,
                   **kwargs: Any) -> None:
            loss = scalar((logs or {}).get("loss"))
            if loss is None or state.global_step <= 0:
                return  # an evaluation's or the end-of-run summary's logs
            if self._resumed_at:
                # The Trainer set its last logged step before this resume moved global_step:
                # its first mean after a resume divides by the restored steps as well.
                step = int(state.global_step)
                loss *= step / max(1, step - self._resumed_at)
                self._resumed_at = 0
            extra: dict[str, float] = {"total_steps": int(state.max_steps)} \
                if state.max_steps else {}
            epoch = (logs or {}).get("epoch", state.epoch)
            if epoch is not None:
                extra["epoch"] = float(epoch)
            self.reporter.report(loss, step=int(state.global_step), **extra)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # The Trainer calls on_step_end before it logs the step: a save that exits (a
            # request, SIGTERM) leaves that step's loss unreported; the restart goes on after it.
            if self.checkpointer is not None:
                self.checkpointer.step_end(int(state.global_step))

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.reporter.sync()

    return SpeconCallback


SpeconCallback = build(_base())
