"""Progress bars and trainer dicts in the forms the current libraries print (tqdm's
``format_meter``, Lightning's ``BAR_FORMAT``, Keras 2's and 3's ``Progbar``, the Hugging Face
``ProgressCallback``), each update read as soon as the next one starts, per output stream."""

from __future__ import annotations

import pytest

from specon.logparse import LogParser, parse_text


@pytest.mark.parametrize(("text", "step", "loss", "fmt"), [
    # Lightning's bar: 0-based epoch, batches of the epoch
    ("Epoch 0:  45%|████▌     | 950/2107 [00:31<00:38, 30.1it/s, v_num=0, train_loss=0.482]",
     950, 0.482, "tqdm"),
    ("Epoch 2:  45%|████▌     | 950/2107 [00:31<00:38, 30.10it/s, v_num=3, train_loss=0.482]",
     2 * 2107 + 950, 0.482, "tqdm"),
    # a plain tqdm loop with set_postfix(loss=...)
    (" 45%|████▌     | 950/2107 [00:31<00:38, 30.1it/s, loss=0.482]", 950, 0.482, "tqdm"),
    ("train:  45%|████▌     | 950/2107 [00:31<00:38,  1.52s/it, loss=4.82e-01, lr=0.001]",
     950, 0.482, "tqdm"),
    # Keras 2 (tf.keras) without a terminal: one line per update
    ("950/2107 [============>.................] - ETA: 38s - loss: 0.4821 - accuracy: 0.8300",
     950, 0.4821, "keras"),
    # Keras 3 (the escapes are stripped)
    ("\x1b[1m 950/2107\x1b[0m \x1b[32m━━━━━━━━━\x1b[0m\x1b[37m━━━━━━━━━━━\x1b[0m \x1b[1m38s\x1b[0m"
     " 33ms/step - accuracy: 0.8300 - loss: 0.4821", 950, 0.4821, "keras"),
])
def test_bar_forms(text: str, step: int, loss: float, fmt: str) -> None:
    records, _ = parse_text("\r" + text + "\r")
    assert [(r.step, r.loss, r.format) for r in records] == [(step, loss, fmt)]


@pytest.mark.parametrize("line", [
    # transformers 4.3x-4.4x: numbers, the epoch rounded to 2 decimals
    "{'loss': 0.4821, 'grad_norm': 1.2345, 'learning_rate': 4.5e-05, 'epoch': 0.45}",
    # current transformers: every float as f"{v:.4g}"
    "{'loss': '0.4821', 'grad_norm': '1.234', 'learning_rate': '4.5e-05', 'epoch': '0.45'}",
    # a numpy scalar's repr (numpy 2)
    "{'loss': np.float64(0.4821), 'learning_rate': 4.5e-05, 'epoch': 0.45}",
])
def test_trainer_dict_forms(line: str) -> None:
    records, _ = parse_text(line + "\n")
    assert [(r.loss, r.metrics["epoch"], r.format) for r in records] == [(0.4821, 0.45, "dict")]


def test_trainer_step_from_the_bar_on_its_line_then_from_the_epoch() -> None:
    bar = " 45%|████▌     | {n}/2107 [00:31<00:38, 30.1it/s]"
    parser = LogParser()
    out = parser.feed("\r" + bar.format(n=900) + "\r" + " " * 50 + "\r"
                      + "{'loss': 0.5, 'epoch': 0.45}\n")
    assert [(r.step, r.loss) for r in out] == [(900, 0.5)]
    # a dict with no bar on its line: the epoch times the 2,000 steps an epoch seen above
    out = parser.feed("{'loss': 0.4, 'epoch': 0.9}\n")
    assert [(r.step, r.loss) for r in out] == [(1800, 0.4)]
    # a bar on another line (or stream) is not the dict's
    parser = LogParser()
    out = parser.feed("\r" + bar.format(n=900) + "\n{'loss': 0.5, 'epoch': 0.45}\n")
    assert [(r.step, r.loss) for r in out] == [(None, 0.5)]
    parser = LogParser()
    parser.feed("\r" + bar.format(n=900) + "\r", stream="stderr")
    out = parser.feed("{'loss': 0.5, 'epoch': 0.45}\n", stream="stdout")
    assert [(r.step, r.loss) for r in out] == [(None, 0.5)]


def test_each_update_is_read_when_the_next_begins_and_streams_do_not_mix() -> None:
    parser = LogParser()
    assert parser.feed("\rstep 1 loss=0.9", stream="stdout") == []
    assert parser.feed("\rstep 7 loss=", stream="stderr") == []
    out = parser.feed("\rstep 2 loss=0.8\rst", stream="stdout")
    assert [(r.step, r.loss) for r in out] == [(1, 0.9), (2, 0.8)]
    out = parser.feed("0.5\r", stream="stderr")
    assert [(r.step, r.loss) for r in out] == [(7, 0.5)]


def test_the_rest_of_an_overlong_update_is_skipped_not_read_as_a_new_one() -> None:
    parser = LogParser(max_line=100)
    out = parser.feed("\rstep 1 " + "x" * 200)
    out += parser.feed("x step 12 loss=0.5\rstep 13 loss=0.4\r")
    assert [(r.step, r.loss) for r in out] == [(13, 0.4)]
    assert parser.counters.oversized == 1


def test_resync_drops_the_cut_first_update_of_each_stream() -> None:
    parser = LogParser()
    parser.resync(["stdout"])
    out = parser.feed("50/2107 [00:31<00:38, 30.1it/s, loss=0.5]\r"
                      " 45%|████▌     | 951/2107 [00:31<00:38, 30.1it/s, loss=0.4]\r", "stdout")
    assert [(r.step, r.loss) for r in out] == [(951, 0.4)]
