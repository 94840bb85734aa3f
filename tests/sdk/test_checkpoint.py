"""Checkpoints of plain state: atomic rotation, verification, resume from the last good one,
requests and the saved signal, exit 143."""

from __future__ import annotations

import io
import json

import pytest

from specon.sdk.checkpoint import EXIT_STOPPED, REQUEST_FILE, SAVED_FILE, Checkpointer
from specon.sdk.progress import Reporter


def make(tmp_path, **kw) -> tuple[Checkpointer, io.StringIO]:
    out = io.StringIO()
    ckpt = Checkpointer(tmp_path / "ckpt", reporter=Reporter(stdout=out),
                        handle_sigterm=False, **kw)
    return ckpt, out


def events(out: io.StringIO, name: str) -> list[dict]:
    recs = [json.loads(line) for line in out.getvalue().splitlines()]
    return [r for r in recs if r["event"] == name]


def test_save_and_resume_round_trip_and_keep_two(tmp_path):
    ckpt, _out = make(tmp_path)
    for step in (10, 20, 30):
        saved = ckpt.save({"w": [step, 1.5]}, step)
        assert saved is not None and saved.step == step
    assert [s for s, _ in ckpt.checkpoints()] == [30, 20]
    files = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert files == ["ckpt-000000020.json", "ckpt-000000020.safetensors",
                     "ckpt-000000030.json", "ckpt-000000030.safetensors", SAVED_FILE]
    again, out2 = make(tmp_path)
    restored = again.resume()
    assert restored is not None
    assert (restored.step, restored.state, restored.rejected) == (30, {"w": [30, 1.5]}, ())
    assert events(out2, "resume")[0]["name"] == "ckpt-000000030"
    saved_file = json.loads((tmp_path / "ckpt" / SAVED_FILE).read_text())
    assert saved_file["checkpoint"] == "ckpt-000000030" and saved_file["step"] == 30


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(("damage", "reason"), [(_truncate, "size mismatch"),
                                                 (_flip, "checksum mismatch")])
def test_corrupt_newest_falls_back_to_the_previous_and_says_so(tmp_path, damage, reason):
    ckpt, _ = make(tmp_path)
    ckpt.save({"v": 1}, 1)
    ckpt.save({"v": 2}, 2)
    damage(tmp_path / "ckpt" / "ckpt-000000002.safetensors")
    again, out = make(tmp_path)
    restored = again.resume()
    assert restored is not None
    assert (restored.step, restored.state) == (1, {"v": 1})
    assert restored.rejected[0][0] == "ckpt-000000002"
    assert restored.rejected[0][1].startswith(reason)
    assert "rejected newer checkpoints: ckpt-000000002" in restored.describe()
    event = events(out, "resume")[0]
    assert event["name"] == "ckpt-000000001"
    assert event["rejected"][0]["name"] == "ckpt-000000002"


def test_unreadable_manifest_and_orphan_data_are_skipped(tmp_path):
    ckpt, _ = make(tmp_path)
    ckpt.save({"v": 1}, 1)
    ckpt.save({"v": 2}, 2)
    (tmp_path / "ckpt" / "ckpt-000000002.json").write_text("{not json")
    # a data file whose manifest was never written (a crash between the two renames)
    (tmp_path / "ckpt" / "ckpt-000000003.safetensors").write_bytes(b"partial")
    (tmp_path / "ckpt" / ".tmp-ckpt-000000004.safetensors-1").write_bytes(b"partial")
    again, _ = make(tmp_path)
    restored = again.resume()
    assert restored is not None and restored.state == {"v": 1}
    assert restored.rejected[0][1].startswith("unreadable manifest")
    assert not (tmp_path / "ckpt" / ".tmp-ckpt-000000004.safetensors-1").exists()


def test_nothing_good_means_a_fresh_start_not_an_error(tmp_path):
    ckpt, _ = make(tmp_path)
    ckpt.save({"v": 1}, 1)
    _flip(tmp_path / "ckpt" / "ckpt-000000001.safetensors")
    again, out = make(tmp_path)
    assert again.resume() is None
    assert events(out, "resume-failed")[0]["rejected"][0]["reason"] == "checksum mismatch"


def test_a_save_that_does_not_verify_keeps_the_previous_one(tmp_path):
    class FlakyDisk(Checkpointer):
        """Fault injection: the re-read after the write sees other bytes."""

        def _verify_file(self, saved):
            return saved.step != 2 and super()._verify_file(saved)

    out = io.StringIO()
    ckpt = FlakyDisk(tmp_path / "ckpt", reporter=Reporter(stdout=out), handle_sigterm=False)
    ckpt.save({"v": 1}, 1)
    assert ckpt.save({"v": 2}, 2) is None
    assert [s for s, _ in ckpt.checkpoints()] == [1]
    assert events(out, "checkpoint-failed")[0]["step"] == 2
    restored, _ = make(tmp_path)
    assert restored.resume().state == {"v": 1}


def test_without_a_directory_nothing_is_saved(monkeypatch):
    monkeypatch.delenv("SPECON_CHECKPOINT_DIR", raising=False)
    ckpt = Checkpointer(handle_sigterm=False)
    assert not ckpt.enabled
    assert ckpt.save({"v": 1}, 1) is None
    assert ckpt.resume() is None
    assert ckpt.step_end(1, {"v": 1}) is None


def test_periodic_saves(tmp_path):
    ckpt, _ = make(tmp_path, every=5)
    saved = [ckpt.step_end(step, {"s": step}) for step in range(1, 12)]
    assert [s.step for s in saved if s is not None] == [5, 10]


def test_request_is_honoured_once_and_acknowledged_in_saved_json(tmp_path):
    ckpt, _out = make(tmp_path)
    assert ckpt.step_end(1, {"s": 1}) is None
    (tmp_path / "ckpt" / REQUEST_FILE).write_text(json.dumps({"id": "req-1", "exit": False}))
    saved = ckpt.step_end(2, lambda: {"s": 2})
    assert saved is not None and saved.step == 2
    ack = json.loads((tmp_path / "ckpt" / SAVED_FILE).read_text())
    assert (ack["request"], ack["checkpoint"], ack["step"]) == ("req-1", "ckpt-000000002", 2)
    assert ack["sha256"] == saved.sha256
    assert ckpt.step_end(3, {"s": 3}) is None
    # after a restart the same request is still known as honoured
    again, _ = make(tmp_path)
    assert again.step_end(4, {"s": 4}) is None
    (tmp_path / "ckpt" / REQUEST_FILE).write_text(json.dumps({"id": "req-2"}))
    assert again.step_end(5, {"s": 5}).step == 5


def test_half_written_request_is_ignored_until_complete(tmp_path):
    ckpt, _ = make(tmp_path)
    (tmp_path / "ckpt" / REQUEST_FILE).write_text('{"id": "req')
    assert ckpt.step_end(1, {"s": 1}) is None


def test_exit_request_and_stop_save_then_exit_143(tmp_path):
    ckpt, out = make(tmp_path)
    (tmp_path / "ckpt" / REQUEST_FILE).write_text(json.dumps({"id": "m1", "exit": True}))
    with pytest.raises(SystemExit) as exc:
        ckpt.step_end(7, {"s": 7})
    assert exc.value.code == EXIT_STOPPED
    assert events(out, "stop")[0]["step"] == 7
    again, _ = make(tmp_path)
    assert again.resume().state == {"s": 7}
    again.request_stop("sigterm")
    with pytest.raises(SystemExit) as exc:
        again.step_end(8, {"s": 8})
    assert exc.value.code == EXIT_STOPPED


def test_done_request_saves_then_exits_0_as_completed(tmp_path):
    ckpt, out = make(tmp_path)
    (tmp_path / "ckpt" / REQUEST_FILE).write_text(
        json.dumps({"id": "target-1", "exit": True, "done": True}))
    with pytest.raises(SystemExit) as exc:
        ckpt.step_end(9, {"s": 9})
    assert exc.value.code == 0
    stop = events(out, "stop")[0]
    assert stop["exit_code"] == 0 and stop["reason"] == "done" and stop["step"] == 9
    assert make(tmp_path)[0].resume().state == {"s": 9}


def test_saving_twice_at_one_step_reuses_the_verified_file(tmp_path):
    ckpt, out = make(tmp_path)
    first = ckpt.save({"s": 1}, 1, reason="request")
    second = ckpt.save({"s": 1}, 1, reason="sigterm")
    assert first == second
    assert len(events(out, "checkpoint")) == 1
