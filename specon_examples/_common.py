"""The training loop every example shares: arguments, seeding, threads, SDK progress reports,
checkpoint/resume and SIGTERM handling. A model module supplies only data, model and loss."""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specon.sdk import TorchCheckpointer, report


@dataclass
class Job:
    """What a model module builds: the model, its optimizer (and scheduler), and one step."""

    model: Any
    optimizer: Any
    step: Callable[[], tuple[float, dict[str, float]]]
    scheduler: Any = None


def default_threads() -> int:
    # The cores this process may run on (a CPU-pinned recorder or container sees fewer).
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def parse_args(description: str, iterations: int, argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--iterations", type=int, default=iterations,
                   help=f"training iterations (minibatches) to run in all (default {iterations})")
    p.add_argument("--threads", type=int, default=0,
                   help="torch intra-op threads (default: the CPUs this process may use)")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and minibatch order")
    p.add_argument("--log-every", type=int, default=0,
                   help="report the mean loss every N iterations (default: iterations/200)")
    p.add_argument("--checkpoint-dir", default=None,
                   help="checkpoint directory (default: $SPECON_CHECKPOINT_DIR; unset: none)")
    p.add_argument("--checkpoint-every", type=int, default=None,
                   help="also save every N iterations (default: $SPECON_CHECKPOINT_EVERY or 0)")
    p.add_argument("--no-final-checkpoint", action="store_true",
                   help="do not save the trained state at the end")
    return p.parse_args(argv)


def run(
    name: str,
    description: str,
    iterations: int,
    build: Callable[[], Job],
    argv: list[str] | None = None,
) -> None:
    """Parse arguments, build the job under the seed, resume if a checkpoint exists, train."""
    args = parse_args(description, iterations, argv)
    # Debian's torch runs OpenMP next to OpenBLAS's own threads; OpenMP's default busy-wait
    # then starves the BLAS threads of a small machine (docs/examples.md). Must be set
    # before torch loads; a value from the environment wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    threads = args.threads or default_threads()
    torch.set_num_threads(threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    try:
        import numpy

        numpy.random.seed(args.seed)
    except ImportError:
        pass
    job = build()
    total = args.iterations
    log_every = args.log_every or max(1, total // 200)

    # The running mean between reports is state too: it travels in the checkpoint.
    window = {"sum": 0.0, "count": 0, "metrics": {}}
    ckpt = TorchCheckpointer(
        job.model, job.optimizer, job.scheduler,
        directory=args.checkpoint_dir, every=args.checkpoint_every,
        extra=lambda: dict(window),
    )
    restored = ckpt.resume()
    start = 0
    if restored is not None:
        start = restored.step
        window = dict(ckpt.extra or window)
        print(f"[{name}] {restored.describe()}", flush=True)
    print(f"[{name}] iterations={total} threads={threads} seed={args.seed} start={start}",
          flush=True)
    began = time.perf_counter()
    job.model.train()
    for step in range(start + 1, total + 1):
        loss, metrics = job.step()
        window["sum"] += loss
        window["count"] += 1
        sums = window["metrics"]
        for key, value in metrics.items():
            sums[key] = sums.get(key, 0.0) + value
        if step % log_every == 0 or step == total:
            n = window["count"]
            report(window["sum"] / n, step=step, **{k: v / n for k, v in sums.items()})
            window = {"sum": 0.0, "count": 0, "metrics": {}}
        ckpt.step_end(step)
    if ckpt.enabled and not args.no_final_checkpoint and total > start:
        ckpt.save_now(total, reason="final")
    print(f"[{name}] done: {total - start} iterations in {time.perf_counter() - began:.2f} s",
          flush=True)


def minibatch(n: int, size: int) -> Any:
    """Indices of one minibatch drawn from torch's global generator (restored on resume)."""
    import torch

    return torch.randint(0, n, (size,))


def classifier(model: Any, optimizer: Any, forward: Callable[[Any], Any], labels: Any, n: int,
               batch: int, scheduler: Any = None) -> Job:
    """A classifier's job: each step draws ``batch`` of the ``n`` samples, takes the cross-entropy
    of ``forward(indices)`` against their labels, steps the optimizer (and the scheduler), and
    reports the minibatch's accuracy beside its loss."""
    from torch.nn import functional as F

    def step() -> tuple[float, dict[str, float]]:
        idx = minibatch(n, batch)
        logits = forward(idx)
        loss = F.cross_entropy(logits, labels[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        accuracy = float((logits.argmax(1) == labels[idx]).float().mean())
        return float(loss), {"accuracy": accuracy}

    return Job(model, optimizer, step, scheduler)


def digits() -> tuple[Any, Any]:
    """scikit-learn's bundled 8x8 digits (1797 images): pixels scaled to [0, 1], labels."""
    import torch

    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise SystemExit(
            "this example needs scikit-learn for its bundled digits data "
            "(pip install scikit-learn, or apt-get install python3-sklearn)"
        ) from exc
    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    return x, y
