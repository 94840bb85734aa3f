"""Container logs as the kubelet's nodes write them, for tests of the agent's log path.

:class:`CriLog` frames a process's writes the way containerd's CRI logger does
(``internal/cri/io/logger.go``, ``redirectLogs``): per stream, a line ends at ``\\n`` (an ``F``
record; the ``\\n`` and a ``\\r`` before it are not in the content); content without a newline
stays in containerd until more than ``max_len`` bytes (``max_container_log_line_size``, 16 KiB by
default) are buffered, then goes out as a ``P`` record of exactly ``max_len`` bytes, cut at any
byte (inside a bar, a number or a UTF-8 character). Nothing is held by the test that containerd
would have written.

The writers below print what the frameworks print, byte for byte in their formats (checked
against tests/logparse/fixtures, captured from real runs, and against the libraries' sources):
Lightning's tqdm bar (``TQDMProgressBar``: ``file=sys.stdout``, ``{l_bar}{bar}| {n_fmt}/
{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]``, a 10-character bar without a
terminal, redrawn after the step with the new rate and again with the new loss), Keras 3's
``Progbar`` (``\\b`` times the last width then ``\\r``, always: ``"posix" in sys.modules``
makes its display dynamic), Keras 2's (one line per update without a terminal) and the Hugging
Face Trainer's (a tqdm bar on stderr; every ``logging_steps`` ``tqdm.write`` clears it, prints
the dict on stdout and redraws it).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

TIME = b"2026-11-26T09:00:00.000000000Z"
BLOCKS = " ▏▎▍▌▋▊▉█"


@dataclass
class CriLog:
    path: Path
    max_len: int = 16 * 1024
    _held: dict[str, bytes] = field(default_factory=dict)

    def write(self, stream: str, data: bytes) -> None:
        """The process wrote ``data`` to ``stream``: append the records containerd would."""
        buf = self._held.pop(stream, b"") + data
        out = []
        while True:
            nl = buf.find(b"\n")
            if nl < 0 or nl > self.max_len:
                if len(buf) <= self.max_len:
                    break
                out.append(b" ".join((TIME, stream.encode(), b"P", buf[:self.max_len])))
                buf = buf[self.max_len:]
                continue
            line = buf[:nl]
            if line.endswith(b"\r"):
                line = line[:-1]
            out.append(b" ".join((TIME, stream.encode(), b"F", line)))
            buf = buf[nl + 1:]
        self._held[stream] = buf
        if out:
            with open(self.path, "ab") as f:
                f.write(b"".join(r + b"\n" for r in out))

    def held(self, stream: str) -> int:
        """Bytes containerd still holds for ``stream`` (not in the file yet)."""
        return len(self._held.get(stream, b""))


def loss_at(step: int) -> float:
    return 0.3 + 0.6 * math.exp(-step / 700) + 0.01 * math.sin(step)


def _tqdm_bar(frac: float) -> str:
    filled = frac * 10
    whole = int(filled)
    bar = BLOCKS[-1] * whole
    if whole < 10:
        bar += BLOCKS[int((filled - whole) * 8)] + " " * (9 - whole)
    return bar


def _clock(seconds: float) -> str:
    return f"{int(seconds) // 60:02d}:{int(seconds) % 60:02d}"


@dataclass(frozen=True)
class Update:
    """One redraw a test expects the agent to read: the step and the loss it shows."""

    step: int
    loss: float


def lightning_epoch(total: int, upto: int, epoch: int = 0,
                    rate: float = 30.1) -> Iterator[tuple[str, bytes, Update | None]]:
    """Lightning 2's training bar for one epoch of ``total`` batches, up to batch ``upto``:
    (stream, bytes, the update it shows when it shows a new loss)."""
    postfix = ""
    yield "stdout", f"\rEpoch {epoch}:   0%|          | 0/{total} [00:00<?, ?it/s]".encode(), None
    for n in range(1, upto + 1):
        head = f"\rEpoch {epoch}: {int(100 * n / total):3d}%|{_tqdm_bar(n / total)}| {n}/{total} "
        times = f"[{_clock(n / rate)}<{_clock((total - n) / rate)}, {rate + n % 7 / 10:.2f}it/s"
        yield "stdout", (head + times + postfix + "]").encode(), None
        loss = float(f"{loss_at(n):.3g}")
        postfix = f", v_num=0, train_loss={loss:.3g}"
        yield "stdout", (head + times + postfix + "]").encode(), Update(epoch * total + n, loss)


def keras3_epoch(total: int, upto: int, epoch: int = 1,
                 epochs: int = 3) -> Iterator[tuple[str, bytes, Update | None]]:
    """Keras 3's ``model.fit(verbose=1)`` for one epoch (1-based ``epoch``), up to ``upto``."""
    yield "stdout", f"Epoch {epoch}/{epochs}\n".encode(), None
    width = len(str(total))
    prev = 0
    for n in range(1, upto + 1):
        done = int(20 * n / total)
        loss = round(loss_at(n), 4)
        bar = (f"\x1b[1m{n:>{width}}/{total}\x1b[0m \x1b[32m{'━' * done}\x1b[0m"
               f"\x1b[37m{'━' * (20 - done)}\x1b[0m \x1b[1m{(total - n) // 30}s\x1b[0m "
               f"33ms/step - accuracy: {0.5 + n / (4 * total):.4f} - loss: {loss:.4f}")
        yield "stdout", ("\b" * prev + "\r" + bar).encode(), Update((epoch - 1) * total + n, loss)
        prev = len(bar) - 30  # its printed width (the escapes take no room)


def keras2_epoch(total: int, upto: int) -> Iterator[tuple[str, bytes, Update | None]]:
    """tf.keras 2's ``Progbar`` without a terminal: one line per update."""
    yield "stdout", b"Epoch 1/3\n", None
    digits = len(str(total))
    for n in range(1, upto + 1):
        prog = int(30 * n / total)
        bar = f"{n:{digits}d}/{total} [" + ("=" * (prog - 1) + ">" if prog else "")
        bar += "." * (30 - prog) + "]"
        loss = round(loss_at(n), 4)
        info = f" - ETA: {(total - n) // 30}s - loss: {loss:.4f} - accuracy: 0.8300"
        yield "stdout", (bar + info + "\n").encode(), Update(n, loss)


def trainer_run(total: int, upto: int, per_epoch: int, logging_steps: int = 5,
                merged: bool = False) -> Iterator[tuple[str, bytes, Update | None]]:
    """The Hugging Face Trainer (current ``ProgressCallback``: floats as ``f"{v:.4g}"``);
    ``merged``: stdout and stderr are one stream (a terminal, or ``2>&1``)."""
    err = "stdout" if merged else "stderr"

    def bar(n: int) -> bytes:
        return (f"\r{int(100 * n / total):3d}%|{_tqdm_bar(n / total)}| {n}/{total} "
                f"[{_clock(n / 4)}<{_clock((total - n) / 4)}, {3.9 + n % 3 / 10:.2f}it/s]").encode()

    yield err, bar(0), None
    for n in range(1, upto + 1):
        yield err, bar(n), None
        if n % logging_steps == 0:
            loss = float(f"{loss_at(n):.4g}")
            logs = {"loss": f"{loss:.4g}", "grad_norm": f"{1 + n % 5 / 7:.4g}",
                    "learning_rate": f"{5e-5 * (1 - n / total):.4g}",
                    "epoch": f"{n / per_epoch:.4g}"}
            yield err, b"\r" + b" " * len(bar(n)) + b"\r", None
            yield "stdout", (str(logs) + "\n").encode(), Update(n, loss)
            yield err, bar(n), None
