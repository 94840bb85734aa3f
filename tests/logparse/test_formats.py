"""The log formats the agent reads, on real captured output (fixtures/README.md says how each
was captured) and on the plain and user-regex forms."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from specon.logparse import LogParser, parse_text

FIXTURES = Path(__file__).with_name("fixtures")


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def test_our_sdk_lines_equal_the_json_they_carry():
    data = fixture("specon-sdk-gru.log")
    records, counters = parse_text(data)
    expected = [json.loads(line) for line in data.decode().splitlines() if line.startswith("{")]
    progress = [e for e in expected if e["event"] == "progress"]
    assert [(r.step, r.loss, dict(r.metrics)) for r in records] == [
        (e["step"], e["loss"], e["metrics"]) for e in progress]
    assert {r.format for r in records} == {"specon"}
    # the two checkpoint events and the two plain lines are not losses, and not junk either
    assert (counters.records, counters.ignored, counters.malformed) == (4, 4, 0)


def test_keras_progress_bar_with_colours_backspaces_and_carriage_returns():
    records, counters = parse_text(fixture("keras-3.0.5-verbose1.log"))
    assert [r.step for r in records] == [1, 16, 17, 32, 33, 48]  # epoch-aware global steps
    assert records[0].loss == 0.8133 and records[0].metrics == {"accuracy": 0.4375}
    last = records[-1]
    assert (last.loss, last.metrics["val_loss"], last.format) == (0.442, 0.3995, "keras")
    assert counters.malformed == 0 and counters.non_finite == 0


def test_keras_one_line_per_epoch():
    records, _ = parse_text(fixture("keras-3.0.5-verbose2.log"))
    assert [(r.step, r.loss) for r in records] == [(16, 0.6767), (32, 0.519), (48, 0.4271)]
    assert records[0].metrics == {"accuracy": 0.5859, "val_accuracy": 0.6641, "val_loss": 0.5979}


def test_lightning_tqdm_postfix():
    records, counters = parse_text(fixture("pytorch-lightning-2.0.9.log"))
    steps = [r.step for r in records]
    assert steps[0] == 1 and steps[-1] == 60  # 3 epochs of 20 batches
    assert steps == sorted(steps)
    assert records[-1].loss == 0.189 and records[-1].format == "tqdm"
    assert counters.duplicates > 0  # the bar redraws the same values: reported once


def test_hugging_face_trainer_dicts_and_not_its_summary():
    records, counters = parse_text(fixture("transformers-4.33.3-trainer.log"))
    assert [r.loss for r in records] == [0.7559, 0.5633, 0.4171, 0.3857, 0.3345, 0.3031,
                                         0.3399, 0.2971]
    assert [r.metrics["epoch"] for r in records] == [0.25 * k for k in range(1, 9)]
    assert all(r.format == "dict" for r in records)
    # the step is the counter of the bar drawn on the dict's own line; this toy run's steps
    # took under tqdm's 0.1 s redraw interval, so that bar lags the dict by the 5 steps of
    # one logging interval (the first line's bar still shows 0/40: no step)
    assert [r.step for r in records] == [None, 5, 10, 15, 20, 25, 30, 35]
    # the end-of-run summary carries train_loss, the mean over the run: not a progress point
    assert 0.42456677854061126 not in [r.loss for r in records]
    assert counters.malformed == 0


@pytest.mark.parametrize(("line", "step", "loss", "metrics"), [
    ("loss=0.123", None, 0.123, {}),
    ("loss: 0.123", None, 0.123, {}),
    ("step 100 loss=0.5 acc=0.9", 100, 0.5, {"acc": 0.9}),
    ("Epoch 2, Step 120, Loss: 1.5e-3", 120, 0.0015, {}),
    ("iteration=7 train_loss=2 lr=1e-4", 7, 2.0, {"lr": 0.0001}),
    ("[12:00:01] INFO step=3 loss=tensor(0.25, grad_fn=<AddBackward0>)", 3, 0.25, {}),
    ("\x1b[32mINFO\x1b[0m \x1b[1mloss\x1b[0m=0.75", None, 0.75, {}),
    ('{"loss": 0.4, "global_step": 9}', 9, 0.4, {}),
    ("train/loss: 0.31 | val/loss: 0.4", None, 0.31, {"val/loss": 0.4}),
])
def test_plain_forms(line, step, loss, metrics):
    records, _ = parse_text(line + "\n")
    assert len(records) == 1
    assert (records[0].step, records[0].loss, dict(records[0].metrics)) == (step, loss, metrics)


def test_lines_without_a_training_loss_are_ignored_not_records():
    text = ("Loading data...\nETA: 0s\nval_loss=0.5\n2026/11/21 12:00 started\n"
            "{'train_runtime': 3.0, 'train_loss': 0.4}\neval_loss: 0.2\n")
    records, counters = parse_text(text)
    assert records == [] and counters.ignored == 6


def test_nan_and_inf_are_records_and_counted():
    records, counters = parse_text("loss=nan\nloss: inf\nloss=-Infinity\n"
                                   '{"specon":1,"event":"progress","step":1,"loss":"nan","time":0}\n')
    assert [math.isnan(r.loss) for r in records] == [True, False, False, True]
    assert records[1].loss == math.inf and records[2].loss == -math.inf
    assert counters.non_finite == 4


def test_a_partial_line_waits_for_its_end():
    parser = LogParser()
    assert parser.feed(b"step=1 loss=0.12") == []
    out = parser.feed(b"5\nstep=2 loss=0.1")
    assert [(r.step, r.loss) for r in out] == [(1, 0.125)]
    assert [(r.step, r.loss) for r in parser.flush()] == [(2, 0.1)]


def test_a_utf8_character_split_across_chunks_survives():
    line = "épocha ━━ loss=0.5\n".encode()
    parser = LogParser()
    out = [*parser.feed(line[:1]), *parser.feed(line[1:2]), *parser.feed(line[2:])]
    assert [r.loss for r in out] == [0.5]


def test_a_torn_line_of_ours_is_malformed_not_a_wrong_loss():
    records, counters = parse_text('{"specon":1,"event":"progress","step":4,"loss":0.\n')
    assert records == [] and counters.malformed == 1


def test_oversized_segments_are_dropped_and_counted():
    parser = LogParser(max_line=100)
    out = parser.feed("x" * 500 + " loss=1\nloss=2\n")
    assert [r.loss for r in out] == [2.0]
    assert parser.counters.oversized == 1


def test_user_regex_from_an_annotation():
    parser = LogParser(regex=r"it (?P<step>\d+) objective (?P<loss>\S+) gap (?P<gap>\S+)")
    out = parser.feed("it 12 objective 3.5 gap 0.1\nloss=9\nit 13 objective bad gap 0\n")
    assert [(r.step, r.loss, dict(r.metrics), r.format) for r in out] == [
        (12, 3.5, {"gap": 0.1}, "regex"), (None, 9.0, {}, "text")]
    assert parser.counters.malformed == 1


def test_a_regex_without_a_loss_group_is_refused_at_once():
    with pytest.raises(ValueError, match="loss"):
        LogParser(regex=r"step (\d+)")
    with pytest.raises(ValueError, match="regular expression"):
        LogParser(regex=r"(?P<loss>")


def test_negative_steps_are_no_steps():
    records, _ = parse_text('{"specon":1,"event":"progress","step":-3,"loss":1.0}\n'
                            "step=-2 loss=1\n")
    assert [r.step for r in records] == [None, None]
