"""Progress bars read through the agent's real log path (ProgressSource: FileTail, the CRI
decoder, the parser) while the epoch is still running: a bar redrawn with ``\\r`` never ends
its line until the epoch does, and containerd writes it as ``P`` records of 16 KiB cut at any
byte (tests/crilib.py frames the frameworks' output as containerd does)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from pathlib import Path

from crilib import (
    TIME,
    CriLog,
    Update,
    keras2_epoch,
    keras3_epoch,
    lightning_epoch,
    trainer_run,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from specon.logparse import parse_text
from specon_agent.progress import ProgressSource

Writes = Iterable[tuple[str, bytes, Update | None]]


def run(tmp_path: Path, writes: Writes, poll_every: int = 50
        ) -> tuple[ProgressSource, CriLog, list[Update], set[tuple[int | None, float]]]:
    """Write ``writes`` to a CRI log, polling the agent's source every ``poll_every`` writes;
    returns what was written to the file so far and every (step, loss) the agent read."""
    log = CriLog(tmp_path / "0.log")
    log.path.write_bytes(b"")
    src = ProgressSource(log.path, "cri")
    # each update, its stream, where it ends in that stream's output, and whether it ends its line
    shown: list[tuple[Update, str, int, bool]] = []
    written: dict[str, int] = {}
    read: set[tuple[int | None, float]] = set()
    for i, (stream, data, update) in enumerate(writes):
        log.write(stream, data)
        written[stream] = written.get(stream, 0) + len(data)
        if update is not None:
            shown.append((update, stream, written[stream], data.endswith(b"\n")))
        if i % poll_every == 0:
            reading = src.poll()
            read.update(zip(reading.steps, reading.losses, strict=True))
    reading = src.poll()
    read.update(zip(reading.steps, reading.losses, strict=True))
    # What containerd has written to the file: an update still (partly) in its buffer is not
    # there, and a redrawn one is known to be whole only once the next one has begun.
    out = {k: n - log.held(k) for k, n in written.items()}
    in_file = [u for u, k, end, nl in shown if end < out[k] or (nl and end <= out[k])]
    return src, log, in_file, read


def test_a_lightning_bar_is_read_step_by_step_in_its_first_epoch(tmp_path: Path) -> None:
    """The issue-30 case: 0 of 2,107 mid-epoch losses reached the agent before."""
    src, log, shown, read = run(tmp_path, lightning_epoch(total=2107, upto=1500))
    assert log.held("stdout") > 0  # mid-epoch: the bar's line has not ended
    assert log.path.stat().st_size > 250_000
    # every step whose redraw containerd has written (all but its last 16 KiB) was read, with
    # its loss; the redraw with the new rate but the last loss reads as that step too
    assert len(shown) > 1400
    assert all((u.step, u.loss) in read for u in shown)
    expected = {u.step: u.loss for u in shown}
    assert all(s is not None for s, _ in read)
    assert all(x in (expected.get(s), expected.get(s - 1)) for s, x in read if s in expected)
    assert src.stats.dropped_lines == 0


def test_at_least_95_percent_of_the_bar_losses_in_the_file_are_read_mid_epoch(
        tmp_path: Path) -> None:
    for name, writes in (("lightning", lightning_epoch(total=2107, upto=1000)),
                         ("keras3", keras3_epoch(total=850, upto=600)),
                         ("keras2", keras2_epoch(total=2107, upto=1000))):
        d = tmp_path / name
        d.mkdir()
        _, _, shown, read = run(d, writes, poll_every=7)
        got = [u for u in shown if (u.step, u.loss) in read]
        assert shown, name
        assert len(got) >= 0.95 * len(shown), (name, len(got), len(shown))


def test_a_one_epoch_bar_longer_than_a_mebibyte_loses_nothing(tmp_path: Path) -> None:
    """Of a 1.08 MB one-epoch bar, everything before its last MiB was dropped (issue 30)."""
    writes = [*lightning_epoch(total=6000, upto=6000), ("stdout", b"\n", None)]
    src, log, shown, read = run(tmp_path, writes, poll_every=10**9)  # one poll at the end
    assert log.path.stat().st_size > 1_100_000
    assert len(shown) == 6000
    assert all((u.step, u.loss) in read for u in shown)
    assert src.stats.dropped_lines == 0


def test_memory_stays_bounded_on_an_endless_line(tmp_path: Path) -> None:
    """A line of 8 MiB without an end (a bar, or a hostile writer) holds at most one unfinished
    update per stream in the parser, and nothing in the tail or the decoder."""
    log = CriLog(tmp_path / "0.log")
    log.path.write_bytes(b"")
    src = ProgressSource(log.path, "cri")
    steps: list[int | None] = []
    for k in range(64):
        log.write("stdout", b"".join(b"\rstep %d loss=0.5 %s" % (k * 1000 + j, b"x" * 100)
                                     for j in range(1000)))  # 128 KiB of updates, one line
        log.write("stderr", b"y" * (128 * 1024))  # no separator at all: dropped, counted
        reading = src.poll()
        steps += reading.steps
        parser = src._parser  # the parts that hold state between polls
        assert all(len(s.pending) <= parser.max_line for s in parser._streams.values())
        assert len(src._tail._partial) <= 64 * 1024
    # every update containerd has written, in order; the last ones are still in its buffer
    assert steps == list(range(len(steps)))
    assert len(steps) > 64 * 1000 - 16 * 1024 // 100
    assert 1 <= parser.counters.oversized <= 2


def test_a_log_found_mid_bar_never_reads_a_cut_update(tmp_path: Path) -> None:
    """The agent (re)started while a bar was running: it reads the file's last MiB, which
    starts inside an update; the first (cut) update is skipped, never read as a wrong step."""
    log = CriLog(tmp_path / "0.log")
    log.path.write_bytes(b"")
    expected = {}
    for stream, data, update in lightning_epoch(total=20000, upto=12000):
        log.write(stream, data)
        if update is not None:
            expected[update.step] = update.loss
    src = ProgressSource(log.path, "cri", tail_bytes=1 << 20)
    reading = src.poll()
    assert len(reading.losses) > 5000
    for step, loss in zip(reading.steps, reading.losses, strict=True):
        assert step is not None and (expected[step] == loss or expected.get(step - 1) == loss)


def test_hugging_face_trainer_steps_from_the_bar_on_its_line_or_the_epoch(tmp_path: Path) -> None:
    """A terminal (``tty: true``) or ``2>&1``: the dict's line holds the bar drawn just before
    it, whose counter is the dict's step."""
    _, _, shown, read = run(tmp_path, trainer_run(total=300, upto=200, per_epoch=100, merged=True),
                            poll_every=3)
    assert [(u.step, u.loss) for u in shown if (u.step, u.loss) in read] == [
        (u.step, u.loss) for u in shown]


def test_hugging_face_trainer_on_separate_streams_is_read_without_a_step(tmp_path: Path) -> None:
    """Without a terminal the bar is on stderr, the dict on stdout: every dict is read as it
    comes; its step is unknown (the agent counts records), never a wrong one."""
    _, _, shown, read = run(tmp_path, trainer_run(total=300, upto=200, per_epoch=100),
                            poll_every=3)
    assert sorted(loss for _, loss in read) == sorted(u.loss for u in shown)
    assert {step for step, _ in read} == {None}


FIXTURES = sorted((Path(__file__).parents[1] / "logparse" / "fixtures").glob("*.log"))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(FIXTURES), st.integers(40, 3000),
       st.lists(st.integers(1, 700), min_size=1, max_size=50), st.integers(1, 9))
def test_real_captures_framed_by_containerd_read_the_same_as_whole(
        path: Path, max_len: int, cuts: list[int], poll_every: int) -> None:
    """The captured real runs (tests/logparse/fixtures), written in any pieces as the process
    might, framed by containerd with any line size (``P`` records cutting bars, numbers and
    UTF-8 characters anywhere) and polled at any point: the agent reads what the parser reads
    from the whole file at once."""
    data = path.read_bytes()
    whole, _ = parse_text(data)
    with tempfile.TemporaryDirectory() as d:
        log = CriLog(Path(d) / "0.log", max_len=max_len)
        log.path.write_bytes(b"")
        src = ProgressSource(log.path, "cri")
        got: list[tuple[int | None, float]] = []
        pos, i = 0, 0
        while pos < len(data):
            log.write("stdout", data[pos:pos + cuts[i % len(cuts)]])
            pos, i = pos + cuts[i % len(cuts)], i + 1
            if i % poll_every == 0:
                r = src.poll()
                got += zip(r.steps, r.losses, strict=True)
        r = src.poll()
        got += zip(r.steps, r.losses, strict=True)
    assert got == [(rec.step, rec.loss) for rec in whole]


def test_docker_json_file_pieces_are_read_before_their_line_ends(tmp_path: Path) -> None:
    """Docker's json-file driver splits a line at 16 KiB into records without a newline; a
    record naming a stream other than stdout or stderr is invalid framing."""
    log = tmp_path / "c-json.log"
    src = ProgressSource(log, "docker-json")
    updates = "".join(f"\rEpoch 0: {k}/5000 [00:01<00:10, 30.0it/s, train_loss={1 / k:.4f}]"
                      for k in range(1, 400))
    records = [json.dumps({"log": updates[i:i + 16384], "stream": "stderr", "time": "t"})
               for i in range(0, len(updates), 16384)]
    records.append(json.dumps({"log": "loss=1\n", "stream": "evil", "time": "t"}))
    log.write_text("".join(r + "\n" for r in records))
    reading = src.poll()
    assert reading.steps == list(range(1, 399))  # the 399th waits for the next redraw
    assert reading.losses == [float(f"{1 / k:.4f}") for k in range(1, 399)]
    assert reading.parse_errors == 1


def test_a_large_progress_file_found_at_start_keeps_its_first_whole_record(
        tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    path.write_text("".join(
        json.dumps({"specon": 1, "event": "progress", "step": k, "loss": 1.0}) + "\n"
        for k in range(1, 30001)))
    src = ProgressSource(path, "plain", tail_bytes=1 << 20)
    steps = src.poll().steps
    assert steps[-1] == 30000 and steps == list(range(steps[0], 30001))
    line = len(json.dumps({"specon": 1, "event": "progress", "step": 20000, "loss": 1.0})) + 1
    assert len(steps) == (1 << 20) // line  # every whole line of the last MiB


def test_a_log_truncated_mid_bar_does_not_join_the_old_unfinished_update_to_the_new_text(
        tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_bytes(TIME + b" stdout P \rstep 7 loss=0.5\rstep 8 loss=0.\n")
    src = ProgressSource(log, "cri")
    assert src.poll().steps == [7]
    log.write_bytes(TIME + b" stdout F 25 step 1 loss=0.9\n")  # truncated, then rewritten
    reading = src.poll()
    assert src.stats.truncations == 1
    assert list(zip(reading.steps, reading.losses, strict=True)) == [(1, 0.9)]
