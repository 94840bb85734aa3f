"""A tiny Hugging Face Trainer job (Debian's torch, transformers 4.33.3) with SpeCon's callback:
every step's logged loss is an SDK record, with the Trainer's step and total; a checkpoint
request stops it with 143 and the restart resumes at the next step, its first mean loss
corrected for the steps it restored."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.torch, pytest.mark.slow]

ROOT = Path(__file__).parents[2]
JOB = Path(__file__).with_name("hf_job.py")
STEPS = 30  # 320 samples, batches of 32, 3 epochs


@pytest.fixture(scope="module")
def python() -> str:
    found = os.environ.get("SPECON_TRANSFORMERS_PYTHON") or str(
        Path.home() / ".cache/specon-transformers-4.33.3/bin/python")
    check = "import importlib.metadata as m, torch; m.version('transformers')"
    probe = subprocess.run([found, "-c", check], capture_output=True,
                           check=False) if Path(found).exists() else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no transformers environment (hack/test.d/35-frameworks.sh makes one)")
    return found


def run(python: str, tmp_path: Path, *args: str, ckpt: Path | None = None) -> list[dict]:
    progress = tmp_path / "progress.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "SPECON_CHECKPOINT_DIR"}
    env.update(PYTHONPATH=str(ROOT), SPECON_PROGRESS_FILE=str(progress))
    if ckpt is not None:
        env["SPECON_CHECKPOINT_DIR"] = str(ckpt)
    done = subprocess.run([python, str(JOB), *args], cwd=tmp_path, env=env,
                          capture_output=True, check=False)
    assert done.returncode == (143 if args else 0), done.stderr[-2000:]
    return [json.loads(line) for line in progress.read_text().splitlines()]


def test_every_logged_step_is_a_record(python: str, tmp_path: Path) -> None:
    records = [r for r in run(python, tmp_path) if r["event"] == "progress"]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert all(r["metrics"]["total_steps"] == STEPS for r in records)
    assert records[-1]["metrics"]["epoch"] == 3.0
    assert records[-1]["loss"] < records[0]["loss"]


def test_a_request_stops_it_and_the_restart_continues(python: str, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    run(python, tmp_path, "12", ckpt=ckpt)
    events = run(python, tmp_path, ckpt=ckpt)
    kinds = [(e["event"], e.get("step")) for e in events if e["event"] != "progress"]
    assert kinds == [("checkpoint", 12), ("stop", 12), ("resume", 12)]
    steps = [e["step"] for e in events if e["event"] == "progress"]
    # Step 12 was saved before the Trainer logged it: the restart goes on at 13.
    assert steps == [*range(1, 12), *range(13, STEPS + 1)]
    losses = {e["step"]: e["loss"] for e in events if e["event"] == "progress"}
    # Uncorrected, the Trainer's first mean after the resume is divided by 13 steps, not 1.
    assert 0.5 * losses[11] < losses[13] < 2 * losses[11]
