"""The SDK's half of the thread hint (docs/training-contract.md §8): read between steps only
when the file changed, validated as hostile input (one message per bad content, never a crash),
capped by the cores the process sees, applied through the callback."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from specon.sdk import THREADS_FILE, Checkpointer, Reporter
from specon.sdk.threads import MAX_HINT_BYTES, HintError, ThreadHint, parse_hint


def events(out: io.StringIO, name: str) -> list[dict]:
    recs = [json.loads(line) for line in out.getvalue().splitlines()]
    return [r for r in recs if r["event"] == name]


def write(directory: Path, body: object, mtime_ns: int | None = None) -> None:
    path = directory / THREADS_FILE
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


@pytest.mark.parametrize(("data", "why"), [
    (b"", "not JSON"), (b"{", "not JSON"), (b"\xff\xfe", "not JSON"),
    (b"[4]", "not a JSON object (a list)"), (b"{}", 'no "threads" field'),
    (b'{"threads": "4"}', '"threads" must be an integer'),
    (b'{"threads": 4.0}', '"threads" must be an integer'),
    (b'{"threads": true}', '"threads" must be an integer'),
    (b'{"threads": null}', '"threads" must be an integer'),
    (b'{"threads": 0}', "within 1..1024, got 0"), (b'{"threads": -3}', "within 1..1024"),
    (b'{"threads": 1025}', "within 1..1024, got 1025"),
    (b'{"threads": 1e999}', "must be an integer"),
    (b'{"threads": 2, "pad": "' + b"x" * MAX_HINT_BYTES + b'"}', "larger than 4096 bytes"),
])
def test_bad_hints_are_rejected_with_a_reason(data, why):
    with pytest.raises(HintError, match=why.replace("(", r"\(").replace(")", r"\)")):
        parse_hint(data)


def test_good_hint_extra_keys_ignored():
    assert parse_hint(b'{"threads": 3, "limit_cores": 3.02, "note": "x"}') == 3
    assert parse_hint(b'{"threads": 1024}') == 1024


def test_follows_changes_only_and_caps_by_visible_cores(tmp_path):
    applied: list[int] = []
    out = io.StringIO()
    hint = ThreadHint(tmp_path, applied.append, reporter=Reporter(stdout=out), cores=lambda: 4)
    assert hint.poll(1) is None and hint.threads is None  # no file: nothing
    write(tmp_path, {"threads": 2}, 1_000)
    assert hint.poll(2) == 2
    assert hint.poll(3) is None  # unchanged file: not read again
    write(tmp_path, {"threads": 16}, 2_000)
    assert hint.poll(4) == 4  # capped at the 4 cores this process sees
    write(tmp_path, {"threads": 1}, 3_000)
    assert hint.poll(5) == 1
    assert applied == [2, 4, 1]
    assert [(e["threads"], e["step"]) for e in events(out, "threads")] == [(2, 2), (4, 4), (1, 5)]


def test_a_bad_hint_says_so_once_and_keeps_the_threads(tmp_path, capsys):
    applied: list[int] = []
    out = io.StringIO()
    hint = ThreadHint(tmp_path, applied.append, reporter=Reporter(stdout=out), cores=lambda: 8)
    write(tmp_path, {"threads": 3}, 1_000)
    assert hint.poll(1) == 3
    write(tmp_path, {"threads": 0}, 2_000)
    for step in range(2, 6):
        assert hint.poll(step) is None
    assert hint.threads == 3 and applied == [3]
    [rejected] = events(out, "threads-rejected")
    assert rejected["reason"] == '"threads" must be within 1..1024, got 0'
    assert rejected["file"].endswith(THREADS_FILE) and rejected["step"] == 2
    err = capsys.readouterr().err
    assert err.count("ignoring thread hint") == 1 and str(tmp_path / THREADS_FILE) in err


def test_odd_files_never_block_or_crash(tmp_path, capsys):
    out = io.StringIO()
    hint = ThreadHint(tmp_path, None, reporter=Reporter(stdout=out), cores=lambda: 8)
    path = tmp_path / THREADS_FILE
    os.mkfifo(path)  # a reader would block on an ordinary open
    assert hint.poll(1) is None
    path.unlink()
    path.mkdir()
    assert hint.poll(2) is None
    path.rmdir()
    path.write_bytes(b"x" * (10 * MAX_HINT_BYTES))
    assert hint.poll(3) is None
    reasons = [e["reason"] for e in events(out, "threads-rejected")]
    assert reasons[0] == "not JSON (JSONDecodeError)"  # the FIFO reads as empty
    assert reasons[1].startswith("unreadable (")
    assert reasons[2] == "larger than 4096 bytes"
    path.unlink()
    assert hint.poll(4) is None and hint.threads is None
    assert capsys.readouterr().err.count("ignoring thread hint") == 3


def test_an_apply_that_fails_is_reported_not_raised(tmp_path):
    out = io.StringIO()

    def refuse(threads: int) -> None:
        raise RuntimeError("no")

    hint = ThreadHint(tmp_path, refuse, reporter=Reporter(stdout=out), cores=lambda: 8)
    write(tmp_path, {"threads": 2})
    assert hint.poll(1) is None
    assert "could not apply 2 threads (RuntimeError: no)" in events(out, "threads-rejected")[0][
        "reason"]


def test_checkpointer_follows_the_hint_between_steps(tmp_path):
    applied: list[int] = []
    out = io.StringIO()
    ckpt = Checkpointer(tmp_path, handle_sigterm=False, reporter=Reporter(stdout=out),
                        on_threads=applied.append)
    ckpt.step_end(1, {"w": 1})
    assert ckpt.threads is None
    write(tmp_path, {"threads": 1})
    ckpt.step_end(2, {"w": 2})
    assert ckpt.threads == 1 and applied == [1]
    ignoring = Checkpointer(tmp_path, handle_sigterm=False, reporter=Reporter(stdout=out),
                            on_threads=applied.append, follow_threads=False)
    ignoring.step_end(3, {"w": 3})
    assert ignoring.threads is None and applied == [1]
