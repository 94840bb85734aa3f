"""A tiny Hugging Face Trainer job for tests/sdk/test_hf_live.py: a logistic regression (no
download: the model is a torch module of the test's own), SpeCon's callback, a loss logged
every step. Optional argument: a step at which the job asks itself for a checkpoint and exit
(a request.json in $SPECON_CHECKPOINT_DIR, as the agent writes one)."""

import json
import os
import sys

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from specon.sdk.callbacks.hf import SpeconCallback


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 1)

    def forward(self, x, labels):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(self.linear(x), labels)
        return {"loss": loss}


class AskToStop(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            with open(os.path.join(os.environ["SPECON_CHECKPOINT_DIR"], "request.json"), "w") as f:
                json.dump({"id": "live-test", "exit": True}, f)


def main() -> None:
    torch.manual_seed(0)
    xs = torch.randn(320, 8)
    data = [{"x": xs[i], "labels": (xs[i].sum(0, keepdim=True) > 0).float()} for i in range(320)]
    args = TrainingArguments(output_dir="hf-out", per_device_train_batch_size=32,
                             num_train_epochs=3, logging_steps=1, report_to=[], no_cuda=True,
                             save_strategy="no", learning_rate=0.05, disable_tqdm=False)
    stop = [AskToStop(int(sys.argv[1]))] if len(sys.argv) > 1 else []
    trainer = Trainer(model=Model(), args=args, train_dataset=data,
                      callbacks=[*stop, SpeconCallback()])
    trainer.train()


if __name__ == "__main__":
    main()
