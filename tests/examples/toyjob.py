"""A tiny real training job in plain Python (noisy gradient descent on a quadratic) that
honours the training contract through the SDK; the recorder tests run it without torch."""

from __future__ import annotations

import random
import sys
import time

from specon.sdk import Checkpointer, report


def main(iterations: int, checkpoint: bool = True) -> None:
    ckpt = Checkpointer() if checkpoint else Checkpointer(directory="")
    restored = ckpt.resume()
    if restored is not None:
        state = restored.state
        random.setstate(state["rng"])
    else:
        random.seed(11)
        state = {"w": [3.0, -2.0, 1.5]}
    start = restored.step if restored else 0
    for step in range(start + 1, iterations + 1):
        grad = [2 * w + random.gauss(0, 0.05) for w in state["w"]]
        state["w"] = [w - 0.01 * g for w, g in zip(state["w"], grad, strict=True)]
        time.sleep(0.002)  # stands in for the arithmetic of a real model
        report(sum(w * w for w in state["w"]), step=step)
        ckpt.step_end(step, lambda: {"w": list(state["w"]), "rng": random.getstate()})


if __name__ == "__main__":
    main(int(sys.argv[1]), checkpoint="--no-checkpoint" not in sys.argv)
