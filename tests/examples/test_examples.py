"""Every example job runs under the SDK: progress records, the thread count it was given,
a final checkpoint, and the same losses for the same seed."""

from __future__ import annotations

import json
import subprocess

import pytest

from specon_examples import MODELS, launch

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def python() -> str:
    found = launch.torch_python()
    if found is None:
        pytest.skip("no interpreter here imports torch (hack/test.d/30-torch.sh installs one)")
    return found


def run(python: str, model: str, tmp_path, *args: str) -> tuple[str, list[dict]]:
    progress = tmp_path / "progress.jsonl"
    done = subprocess.run(
        launch.command(python, model, "--iterations", "12", "--log-every", "4", *args),
        env=launch.env(SPECON_PROGRESS_FILE=str(progress),
                       SPECON_CHECKPOINT_DIR=str(tmp_path / "ck")),
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, [json.loads(line) for line in progress.read_text().splitlines()]


@pytest.mark.parametrize("model", MODELS)
def test_example_reports_progress_and_saves_a_final_checkpoint(tmp_path, python, model):
    stdout, records = run(python, model, tmp_path, "--threads", "1", "--seed", "7")
    progress = [r for r in records if r["event"] == "progress"]
    assert [r["step"] for r in progress] == [4, 8, 12]
    assert all(isinstance(r["loss"], float) for r in progress)
    assert f"[{model}] iterations=12 threads=1 seed=7 start=0" in stdout
    # the same JSON lines go to stdout, where the agent reads them
    assert sum(1 for line in stdout.splitlines() if line.startswith('{"specon":1')) == len(records)
    final = [r for r in records if r["event"] == "checkpoint"]
    assert final[-1]["reason"] == "final" and final[-1]["step"] == 12
    assert (tmp_path / "ck" / "ckpt-000000012.safetensors").stat().st_size == final[-1]["bytes"]


def test_seed_decides_the_losses(tmp_path, python):
    runs = {}
    for name, seed in (("a", "1"), ("b", "1"), ("c", "2")):
        (tmp_path / name).mkdir()
        _, records = run(python, "gru", tmp_path / name, "--threads", "1", "--seed", seed)
        runs[name] = [r["loss"] for r in records if r["event"] == "progress"]
    assert runs["a"] == runs["b"]
    assert runs["a"] != runs["c"]


def test_a_finished_job_restarted_does_no_more_work(tmp_path, python):
    run(python, "mlp", tmp_path, "--threads", "1")
    stdout, _records = run(python, "mlp", tmp_path, "--threads", "1")
    assert "resumed from ckpt-000000012 (step 12)" in stdout
    assert "done: 0 iterations" in stdout
