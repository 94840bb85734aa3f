"""Following log files incrementally: appends, partial lines, rotation, truncation, a large log
found at start, the engines' framings (Docker json-file, CRI), and garbage counted not raised."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from specon_agent.progress import ProgressSource
from specon_agent.tail import (
    CriDecoder,
    DockerJsonDecoder,
    FileTail,
    newest_cri_log,
)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def test_only_appended_complete_lines_are_returned(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    tail = FileTail(log)
    assert tail.read_lines() == []  # not there yet: nothing, no error
    append(log, b"one\ntw")
    assert tail.read_lines() == [b"one"]
    assert tail.read_lines() == []
    append(log, b"o\nthree\n")
    assert tail.read_lines() == [b"two", b"three"]
    assert tail.stats.bytes_read == len(b"one\ntwo\nthree\n")


def test_rotation_reads_the_rest_of_the_old_file_then_the_new_one(tmp_path: Path) -> None:
    log = tmp_path / "c-json.log"
    tail = FileTail(log)
    append(log, b"1\n2\n")
    assert tail.read_lines() == [b"1", b"2"]
    append(log, b"3\n4-unterminated")
    os.rename(log, tmp_path / "c-json.log.1")  # what Docker's json-file and the kubelet do
    append(log, b"5\n")
    assert tail.read_lines() == [b"3", b"4-unterminated", b"5"]
    assert tail.stats.rotations == 1
    append(log, b"6\n")
    assert tail.read_lines() == [b"6"]


def test_truncation_in_place_starts_again_from_the_beginning(tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    tail = FileTail(log)
    append(log, b"aaaa\nbbbb\n")
    assert tail.read_lines() == [b"aaaa", b"bbbb"]
    with open(log, "wb") as f:  # copytruncate-style rotation
        f.write(b"c\n")
    assert tail.read_lines() == [b"c"]
    assert tail.stats.truncations == 1


def test_a_large_log_found_at_start_is_read_from_its_tail_only(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    line = b"x" * 99 + b"\n"
    append(log, line * 100_000)  # 10 MB
    tail = FileTail(log, tail_bytes=4096, max_read=1 << 20)
    lines = tail.read_lines()
    assert 0 < len(lines) <= 41
    assert all(x == line.rstrip(b"\n") for x in lines)  # the cut line was skipped, not kept
    assert tail.stats.bytes_read <= 4096
    append(log, b"new\n")
    assert tail.read_lines() == [b"new"]
    assert tail.stats.bytes_read <= 4096 + 4


def test_one_poll_reads_at_most_max_read(tmp_path: Path) -> None:
    log = tmp_path / "fast.log"
    tail = FileTail(log, max_read=1000)
    append(log, b"y" * 9 + b"\n")
    tail.read_lines()
    append(log, (b"z" * 9 + b"\n") * 500)
    first = tail.read_lines()
    assert len(first) == 100
    rest = tail.read_lines() + tail.read_lines() + tail.read_lines() + tail.read_lines()
    assert len(first) + len(rest) == 500


def test_docker_json_file_records_joined_per_stream() -> None:
    dec = DockerJsonDecoder()
    raw = [
        json.dumps({"log": "loss=1.5\n", "stream": "stdout", "time": "t"}).encode(),
        # The engine splits a long line into records without the newline.
        json.dumps({"log": "loss=", "stream": "stdout", "time": "t"}).encode(),
        json.dumps({"log": "warning\n", "stream": "stderr", "time": "t"}).encode(),
        json.dumps({"log": "0.5\r\n", "stream": "stdout", "time": "t"}).encode(),
        b'{"log": "torn',  # a record cut short
        b"\x00\xffgarbage",
    ]
    out = dec.feed(raw)
    assert out.lines == ["loss=1.5", "warning", "loss=0.5"]
    assert out.errors == 2


def test_cri_partial_and_full_records() -> None:
    dec = CriDecoder()
    raw = [
        b"2025-11-21T10:00:00.000000001Z stdout P loss=",
        b"2025-11-21T10:00:00.000000002Z stderr F something else",
        b"2025-11-21T10:00:00.000000003Z stdout F 0.25",
        b"2025-11-21T10:00:00.000000004Z stdout F ",
        b"not a cri line",
        b"2025-11-21T10:00:00Z stdin F x",
    ]
    out = dec.feed(raw)
    assert out.lines == ["something else", "loss=0.25", ""]
    assert out.errors == 2


def test_newest_cri_log_follows_container_restarts(tmp_path: Path) -> None:
    d = tmp_path / "ns_pod_uid" / "main"
    d.mkdir(parents=True)
    assert newest_cri_log(d) is None
    for name in ("0.log", "1.log", "1.log.20251121-100000", "10.log", "x.log"):
        (d / name).write_text("")
    assert newest_cri_log(d) == d / "10.log"


def test_progress_source_parses_losses_and_counts_garbage(tmp_path: Path) -> None:
    log = tmp_path / "c-json.log"
    src = ProgressSource(log, "docker-json")

    def rec(text: str) -> bytes:
        return json.dumps({"log": text, "stream": "stdout", "time": "t"}).encode() + b"\n"

    sdk = '{"specon":1,"event":"progress","step":1,"loss":2.5,"time":1.0}\n'
    append(log, rec(sdk) + rec("epoch 1 loss: 1.25\n") + rec("hello\n") + b"###\n"
           + rec('{"specon":1,"event":"progress","step":2,"loss":\n'))
    reading = src.poll()
    assert reading.losses == [2.5, 1.25]
    assert reading.parse_errors == 2  # the unframed line, the malformed SDK record
    assert src.last_loss == 1.25


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=20))
def test_decoders_never_raise_on_any_bytes(raw: list[bytes]) -> None:
    for dec in (DockerJsonDecoder(), CriDecoder()):
        out = dec.feed(raw)
        assert out.errors <= len(raw)


def test_truncation_regrown_past_the_old_offset_between_polls_loses_no_line(tmp_path: Path) -> None:
    """Issue 15: a log truncated in place and rewritten to more than its old size before the next
    poll; the size alone cannot show it, the bytes before the old offset do."""
    log = tmp_path / "regrow.log"
    tail = FileTail(log)
    append(log, b"".join(b"old %03d\n" % i for i in range(150)))
    assert len(tail.read_lines()) == 150
    new = [b"new line %03d" % i for i in range(200)]  # longer than before, in one go
    with open(log, "wb") as f:
        f.write(b"".join(x + b"\n" for x in new))
    assert tail.read_lines() == new
    assert tail.stats.truncations == 1
    append(log, b"after\n")
    assert tail.read_lines() == [b"after"]
    assert tail.stats.truncations == 1


@settings(max_examples=60, deadline=None)
@given(chunks=st.lists(st.integers(min_value=0, max_value=5000), min_size=1, max_size=400))
def test_an_appended_log_read_in_any_chunks_is_every_record_once_and_never_a_truncation(
        chunks: list[int]) -> None:
    """The truncation check (bytes before the offset compared each poll) never fires on a log
    that only grows, whatever the write boundaries: a job's steps are read exactly once, in
    order (what the agent's step rate, and so its deadline judgements, are made of)."""
    records = [json.dumps({"log": json.dumps({"specon": 1, "event": "progress", "step": k,
                                              "loss": 1.0 / k}) + "\n", "stream": "stdout",
                           "time": "2026-11-23T13:00:00.000000000Z"}) + "\n"
               for k in range(15, 3001, 15)]
    data = "".join(records).encode()
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "c-json.log"
        log.write_bytes(b"")
        src = ProgressSource(log, "docker-json")
        steps: list[int | None] = []
        pos, i = 0, 0
        while pos < len(data):
            n = chunks[i % len(chunks)] or 1
            append(log, data[pos:pos + n])
            pos, i = pos + n, i + 1
            steps += src.poll().steps
        steps += src.poll().steps
        assert steps == list(range(15, 3001, 15))
        assert src.stats.truncations == 0 and src.stats.rotations == 0
