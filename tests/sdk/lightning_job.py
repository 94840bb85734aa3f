"""A tiny PyTorch Lightning job for tests/sdk/test_lightning_live.py: a logistic regression,
RichProgressBar, SpeCon's callback and Lightning's CSVLogger. Arguments: the CSVLogger's folder
and, optionally, a step at which the job asks itself for a checkpoint and exit (a request.json
in $SPECON_CHECKPOINT_DIR, as the agent writes one).

Debian's torch 1.13 cannot import its FSDP module on Python 3.11, which Lightning imports
when distributed training is available: the first lines switch that off."""

import json
import os
import sys

import torch.distributed

torch.distributed.is_available = lambda: False

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
from pytorch_lightning.callbacks import RichProgressBar  # noqa: E402
from pytorch_lightning.loggers import CSVLogger  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from specon.sdk.callbacks.lightning import SpeconCallback  # noqa: E402


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 1)

    def training_step(self, batch, index):
        xb, yb = batch
        loss = torch.nn.functional.binary_cross_entropy_with_logits(self.linear(xb), yb)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


class AskToStop(pl.Callback):
    """Writes the agent's request at ``step``; SpeconCallback (after it) honours it."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, index) -> None:
        if trainer.global_step == self.step:
            folder = os.environ["SPECON_CHECKPOINT_DIR"]
            with open(os.path.join(folder, "request.json"), "w") as f:
                json.dump({"id": "live-test", "exit": True}, f)


def main() -> None:
    stop = [AskToStop(int(sys.argv[2]))] if len(sys.argv) > 2 else []
    torch.manual_seed(0)
    x = torch.randn(320, 8)
    y = (x.sum(1, keepdim=True) > 0).float()
    trainer = pl.Trainer(
        max_epochs=3, accelerator="cpu", enable_checkpointing=False, log_every_n_steps=1,
        logger=CSVLogger(sys.argv[1], name="csv", version=0, flush_logs_every_n_steps=4),
        callbacks=[RichProgressBar(), *stop, SpeconCallback()],
    )
    trainer.fit(Model(), DataLoader(TensorDataset(x, y), batch_size=32))


if __name__ == "__main__":
    main()
