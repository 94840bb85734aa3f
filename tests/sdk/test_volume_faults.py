"""The SDK survives its volume (issue 32): a real job process on a real full filesystem (a tiny
tmpfs, filled page by page by the test) and on a real read-only one. A failed save or progress
write is reported (stderr, and the progress file once it can be written) and the job goes on;
SIGTERM with a failing save still exits 143 and the previous verified checkpoint stays; no
temporary file and no data file without its manifest is left behind; ``resume()`` on a
read-only or broken volume falls back to the newest checkpoint it can read, else starts from
scratch and says so. Needs root (``mount``); skipped with the reason elsewhere."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specon.sdk.checkpoint import verify_checkpoint

ROOT = Path(__file__).resolve().parents[2]
PAGE = 4096

#: A job driven step by step: it runs step N once the gate file says N (or more), and writes
#: the step to the ack file once ``step_end`` has returned. Its state is BLOB bytes of zeros.
JOB = textwrap.dedent("""
    import os, time
    from pathlib import Path
    from specon.sdk import Checkpointer, report
    gate, ack = Path(os.environ["GATE"]), Path(os.environ["ACK"])
    blob, steps = int(os.environ["BLOB"]), int(os.environ["STEPS"])
    note = "x" * int(os.environ.get("NOTE", "0"))

    def allowed():
        try:
            return int(gate.read_text())
        except (OSError, ValueError):
            return 0

    ckpt = Checkpointer()
    restored = ckpt.resume()
    first = (restored.step if restored else 0) + 1
    for step in range(first, first + steps):
        while allowed() < step:
            time.sleep(0.005)
        if note:
            report(1.0 / step, step=step, note=note)
        else:
            report(1.0 / step, step=step)
        ckpt.step_end(step, lambda: {"step": step, "blob": bytes(blob)})
        tmp = ack.with_suffix(".tmp")
        tmp.write_text(str(step))
        tmp.replace(ack)
""")


@pytest.fixture
def mount_tmpfs(tmp_path: Path) -> Iterator[object]:
    """``mount_tmpfs(size)``: a fresh tmpfs of ``size`` bytes, unmounted in teardown."""
    mounted: list[Path] = []

    def mount(size: int, name: str = "vol") -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        target = tmp_path / name
        target.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"mount -t tmpfs is not permitted here: {r.stderr.strip()}")
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        if subprocess.run(["umount", str(target)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(target)], capture_output=True)


def read_only(volume: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(volume)], check=True)


class Filler:
    """Takes a tmpfs's free pages away (a file of zeros) so that exactly ``free`` are left."""

    def __init__(self, volume: Path) -> None:
        self.volume = volume
        self.n = 0

    def free_pages(self) -> int:
        return os.statvfs(self.volume).f_bavail

    def leave(self, free: int) -> None:
        self.clear()
        take = self.free_pages() - free
        assert take >= 0, "the volume already has fewer free pages"
        self.n += 1
        with open(self.volume / f"filler-{self.n}", "wb") as f:
            f.write(b"\0" * take * PAGE)
        assert self.free_pages() == free

    def clear(self) -> None:
        for path in self.volume.glob("filler-*"):
            path.unlink()


class Job:
    """The job above as a real process, stepped by the test."""

    def __init__(self, tmp_path: Path, ckpt_dir: Path | None, progress: Path, *,
                 blob: int = 100_000, steps: int = 6, every: int = 1, note: int = 0,
                 run: str = "job") -> None:
        self.dir = tmp_path / run
        self.dir.mkdir()
        self.gate, self.ack = self.dir / "gate", self.dir / "ack"
        self.stdout, self.stderr = self.dir / "stdout", self.dir / "stderr"
        self.progress = progress
        env = dict(os.environ, PYTHONPATH=str(ROOT), GATE=str(self.gate), ACK=str(self.ack),
                   BLOB=str(blob), STEPS=str(steps), NOTE=str(note),
                   SPECON_PROGRESS_FILE=str(progress), SPECON_CHECKPOINT_EVERY=str(every))
        env.pop("SPECON_CHECKPOINT_DIR", None)
        if ckpt_dir is not None:
            env["SPECON_CHECKPOINT_DIR"] = str(ckpt_dir)
        with open(self.stdout, "wb") as out, open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", JOB], env=env, stdout=out,
                                         stderr=err, cwd=self.dir)

    def allow(self, step: int) -> None:
        tmp = self.gate.with_suffix(".tmp")
        tmp.write_text(str(step))
        tmp.replace(self.gate)

    def run_to(self, step: int, timeout: float = 60.0) -> None:
        """Let the job run up to ``step`` and wait until that step's ``step_end`` returned."""
        self.allow(step)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if int(self.ack.read_text()) >= step:
                    return
            except (OSError, ValueError):
                pass
            if self.proc.poll() is not None:
                raise AssertionError(f"the job exited with {self.proc.returncode} before step "
                                     f"{step} ended:\n{self.err()}")
            time.sleep(0.01)
        raise AssertionError(f"step {step} did not end in {timeout} s:\n{self.err()}")

    def wait(self, timeout: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    def err(self) -> str:
        return self.stderr.read_text(errors="replace")

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.stdout.read_text().splitlines()]

    def events(self, name: str) -> list[dict]:
        return [r for r in self.records() if r["event"] == name]


def leftovers(directory: Path) -> list[str]:
    """Temporary files, and checkpoint data files without their manifest."""
    names = {p.name for p in directory.iterdir()}
    return sorted(n for n in names if n.startswith(".tmp-") or (
        n.startswith("ckpt-") and not n.endswith(".json")
        and f"{n.rsplit('.', 1)[0]}.json" not in names))


def steps_of(ckpt_dir: Path) -> list[int]:
    return sorted(int(p.stem[5:]) for p in ckpt_dir.glob("ckpt-*.json"))


def test_a_full_volume_never_stops_the_job_and_leaves_no_partial_files(tmp_path, mount_tmpfs):
    vol = mount_tmpfs(1 << 20)
    ckpt_dir = vol / "ckpt"
    fill = Filler(vol)
    # The progress file is elsewhere here, so that only the saves meet the full volume.
    job = Job(tmp_path, ckpt_dir, tmp_path / "progress.jsonl", blob=100_000, steps=6)
    try:
        job.run_to(1)
        assert steps_of(ckpt_dir) == [1]
        fill.leave(0)  # no room at all: the data file's first write fails
        job.run_to(2)
        fill.leave(25)  # room for the data file (25 pages), none for its manifest
        job.run_to(3)
        assert leftovers(ckpt_dir) == [], "a failed save left files behind"
        assert steps_of(ckpt_dir) == [1]
        fill.clear()
        job.run_to(4)  # room again: this save verifies, and the rotation keeps 4 and 1
        assert steps_of(ckpt_dir) == [1, 4]
        fill.leave(0)
        job.allow(6)
        code = job.wait()
    finally:
        fill.clear()
        if job.proc.poll() is None:
            job.proc.kill()
    assert code == 0, job.err()
    failed = job.events("checkpoint-failed")
    assert [f["step"] for f in failed] == [2, 3, 5, 6]
    assert all("No space left on device" in f["reason"] for f in failed), failed
    assert [c["step"] for c in job.events("checkpoint")] == [1, 4]
    assert [r["step"] for r in job.events("progress")] == [1, 2, 3, 4, 5, 6]
    assert "specon: checkpoint ckpt-000000002 not saved" in job.err()
    assert leftovers(ckpt_dir) == [] and steps_of(ckpt_dir) == [1, 4]
    assert verify_checkpoint(ckpt_dir, "ckpt-000000004")[0] is None
    assert json.loads((ckpt_dir / "saved.json").read_text())["checkpoint"] == "ckpt-000000004"


def test_sigterm_with_a_failing_save_exits_143_and_keeps_the_last_checkpoint(tmp_path,
                                                                               mount_tmpfs):
    vol = mount_tmpfs(1 << 20)
    ckpt_dir = vol / "ckpt"
    fill = Filler(vol)
    progress = tmp_path / "progress.jsonl"
    job = Job(tmp_path, ckpt_dir, progress, blob=100_000, steps=6)
    try:
        job.run_to(1)
        fill.leave(0)
        job.proc.send_signal(signal.SIGTERM)
        job.allow(2)
        code = job.wait()
    finally:
        fill.clear()
    assert code == 143, job.err()
    (stop,) = job.events("stop")
    assert (stop["step"], stop["exit_code"], stop["reason"]) == (2, 143, "sigterm")
    assert stop["checkpoint"] == "ckpt-000000001"  # what a restart resumes from
    assert [f["step"] for f in job.events("checkpoint-failed")] == [2]
    assert leftovers(ckpt_dir) == [] and steps_of(ckpt_dir) == [1]
    assert verify_checkpoint(ckpt_dir, "ckpt-000000001")[0] is None
    assert json.loads((ckpt_dir / "saved.json").read_text())["checkpoint"] == "ckpt-000000001"
    # the stop event reached the progress file too (it is elsewhere, and writable)
    assert [json.loads(line)["event"] for line in progress.read_text().splitlines()][-1] == "stop"
    # and a restart resumes from that checkpoint
    again = Job(tmp_path, ckpt_dir, progress, blob=100_000, steps=1, run="again")
    again.allow(2)
    assert again.wait() == 0, again.err()
    assert again.events("resume")[0]["name"] == "ckpt-000000001"


def test_progress_on_a_full_volume_goes_on_and_is_reported_when_it_can_be(tmp_path,
                                                                         mount_tmpfs):
    vol = mount_tmpfs(64 << 10)
    fill = Filler(vol)
    progress = vol / "progress.jsonl"
    # records of about 1.6 KB, no checkpoints: plain progress reporting
    job = Job(tmp_path, None, progress, steps=10, note=1500)
    try:
        job.run_to(2)
        fill.leave(0)
        job.run_to(8)
        fill.clear()
        job.allow(10)
        code = job.wait()
    finally:
        fill.clear()
    assert code == 0, job.err()
    assert [r["step"] for r in job.events("progress")] == list(range(1, 11))  # all on stdout
    assert f"specon: cannot write the progress file {progress}" in job.err()
    lines = progress.read_text().splitlines()
    written = [json.loads(line) for line in lines]  # every line whole: no torn record
    (gap,) = [r for r in written if r["event"] == "progress-write-failed"]
    steps = [r["step"] for r in written if r["event"] == "progress"]
    assert gap["lost"] == 10 - len(steps) >= 1
    assert "No space left on device" in gap["reason"]
    assert steps[-2:] == [9, 10]


def test_resume_on_a_read_only_volume_takes_the_newest_checkpoint_it_can_read(tmp_path,
                                                                              mount_tmpfs):
    vol = mount_tmpfs(1 << 20)
    ckpt_dir = vol / "ckpt"
    progress = vol / "progress.jsonl"
    first = Job(tmp_path, ckpt_dir, progress, blob=1000, steps=3)
    first.allow(3)
    assert first.wait() == 0, first.err()
    assert steps_of(ckpt_dir) == [2, 3]
    newest = ckpt_dir / "ckpt-000000003.safetensors"
    data = bytearray(newest.read_bytes())
    data[-5] ^= 0x01
    newest.write_bytes(bytes(data))  # a broken newest checkpoint
    read_only(vol)
    job = Job(tmp_path, ckpt_dir, progress, blob=1000, steps=2, run="ro")
    job.allow(4)
    code = job.wait()
    assert code == 0, job.err()
    (resume,) = job.events("resume")
    assert resume["name"] == "ckpt-000000002"
    assert resume["rejected"] == [{"name": "ckpt-000000003", "reason": "checksum mismatch"}]
    assert [r["step"] for r in job.events("progress")] == [3, 4]
    assert [f["step"] for f in job.events("checkpoint-failed")] == [3, 4]
    assert "Read-only file system" in job.err()


def test_an_unusable_checkpoint_volume_means_a_fresh_start_with_a_clear_message(tmp_path,
                                                                              mount_tmpfs):
    vol = mount_tmpfs(64 << 10)
    read_only(vol)
    # the checkpoint folder cannot even be created there
    job = Job(tmp_path, vol / "ckpt", vol / "progress.jsonl", blob=10, steps=2)
    job.allow(2)
    assert job.wait() == 0, job.err()
    assert "starting from scratch" in job.err()
    assert [r["step"] for r in job.events("progress")] == [1, 2]


def test_resume_removes_a_data_file_without_its_manifest_and_temporary_files(tmp_path):
    ckpt_dir = tmp_path / "ckpt"
    first = Job(tmp_path, ckpt_dir, tmp_path / "progress.jsonl", blob=1000, steps=2)
    first.allow(2)
    assert first.wait() == 0, first.err()
    # what a crash between the two renames leaves: a 100 KB data file with no manifest, and
    # a temporary file of each kind
    (ckpt_dir / "ckpt-000000003.safetensors").write_bytes(os.urandom(100_000))
    (ckpt_dir / ".tmp-ckpt-000000003.json-12345").write_bytes(b'{"name": "ckpt-')
    (ckpt_dir / ".tmp-saved.json-12345").write_bytes(b"{")
    job = Job(tmp_path, ckpt_dir, tmp_path / "progress.jsonl", blob=1000, steps=1, every=0,
              run="again")
    job.allow(3)
    assert job.wait() == 0, job.err()
    assert job.events("resume")[0]["name"] == "ckpt-000000002"
    assert leftovers(ckpt_dir) == []
    assert steps_of(ckpt_dir) == [1, 2]
