"""Issue 30's live test: a tiny PyTorch Lightning job (Debian's torch, pytorch-lightning 2.0.9,
the Rich progress bar) with SpeCon's callback; its stdout and stderr framed as containerd
writes a pod's CRI log as they arrive (tests/crilib.py), read by the agent's own progress source.
Every step's loss comes through from the SDK's records, with the bar drawn as in a terminal
(FORCE_COLOR: Rich's stdout proxy, which folded records at 80 columns) and without one; the
job's CSVLogger file gives the same losses through ``specon.io/metrics-csv``'s reader."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
from pathlib import Path

import pytest

from specon_agent.progress import ProgressSource
from tests.crilib import CriLog

pytestmark = [pytest.mark.torch, pytest.mark.slow]

ROOT = Path(__file__).parents[2]
JOB = Path(__file__).with_name("lightning_job.py")
STEPS = 30  # 320 samples, batches of 32, 3 epochs


@pytest.fixture(scope="module")
def python() -> str:
    found = os.environ.get("SPECON_LIGHTNING_PYTHON") or str(
        Path.home() / ".cache/specon-lightning-2.0.9/bin/python")
    check = "import importlib.metadata as m, rich, torch; m.version('pytorch-lightning')"
    probe = subprocess.run([found, "-c", check],
                           capture_output=True, check=False) if Path(found).exists() else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no Lightning environment (hack/test.d/35-frameworks.sh makes one)")
    return found


def run_as_pod(python: str, tmp_path: Path, env: dict[str, str]) -> tuple[Path, Path]:
    """Run the job; each read of its stdout and stderr goes into a CRI log as it arrives."""
    log = CriLog(tmp_path / "0.log")
    progress = tmp_path / "progress.jsonl"
    environ = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "COLUMNS")}
    environ.update(PYTHONPATH=str(ROOT), SPECON_PROGRESS_FILE=str(progress), **env)
    environ.pop("SPECON_CHECKPOINT_DIR", None)
    proc = subprocess.Popen([python, str(JOB), str(tmp_path / "logs")], cwd=tmp_path,
                            env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
    sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
    open_streams = 2
    while open_streams:
        for key, _ in sel.select(timeout=600):
            chunk = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
            if not chunk:
                sel.unregister(key.fileobj)
                open_streams -= 1
                continue
            log.write(key.data, chunk)
    assert proc.wait(timeout=600) == 0
    return log.path, progress


@pytest.mark.parametrize("terminal", [True, False], ids=["force-color", "no-terminal"])
def test_every_step_reaches_the_agent_through_the_callback(python: str, tmp_path: Path,
                                                           terminal: bool) -> None:
    env = {"FORCE_COLOR": "1", "COLUMNS": "80"} if terminal else {}
    path, progress = run_as_pod(python, tmp_path, env)
    reported = [json.loads(line) for line in progress.read_text().splitlines()]
    records = [r for r in reported if r["event"] == "progress"]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert all(r["metrics"]["total_steps"] == STEPS for r in records)
    if terminal:
        assert b"\x1b[" in path.read_bytes() and "Epoch 2/2" in path.read_text()  # Rich drew

    source = ProgressSource(path, "cri")
    reading = source.poll()
    seen = dict(zip(reading.steps, reading.losses, strict=True))
    for r in records:  # every SDK record came through the log, step and loss
        assert seen.get(r["step"]) == r["loss"], r
    assert source._parser.counters.malformed == 0

    csv = ProgressSource(tmp_path / "logs/csv/version_0/metrics.csv", "csv").poll()
    assert csv.steps == [r["step"] for r in records]
    assert csv.losses == pytest.approx([r["loss"] for r in records])


def test_a_checkpoint_request_stops_the_job_and_a_restart_continues_its_steps(
        python: str, tmp_path: Path) -> None:
    """The agent's request (here written by the job itself at step 15) makes the callback save
    and exit 143; the restarted job resumes model, optimizer and Lightning's loop counters and
    reports from step 16 on. Lightning 2.0 restarts an interrupted epoch's data (and warns that
    a mid-epoch resume is not exact), so only the step count is compared, not the losses."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    progress = tmp_path / "progress.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPECON_PROGRESS_FILE": str(progress),
           "SPECON_CHECKPOINT_DIR": str(ckpt)}
    first = subprocess.run([python, str(JOB), str(tmp_path / "a"), "15"], cwd=tmp_path, env=env,
                           capture_output=True, check=False)
    assert first.returncode == 143, first.stderr[-2000:]
    second = subprocess.run([python, str(JOB), str(tmp_path / "b")], cwd=tmp_path, env=env,
                            capture_output=True, check=False)
    assert second.returncode == 0, second.stderr[-2000:]
    events = [json.loads(line) for line in progress.read_text().splitlines()]
    kinds = [(e["event"], e.get("step")) for e in events if e["event"] != "progress"]
    assert kinds == [("checkpoint", 15), ("stop", 15), ("resume", 15)]
    steps = [e["step"] for e in events if e["event"] == "progress"]
    assert steps[:16] == list(range(1, 17))  # 16 right after the resume
    assert steps == sorted(set(steps))  # monotonic across the restart, no step twice
