"""A real example job stopped by SIGTERM mid-run and resumed equals an uninterrupted run with
the same seed exactly: model and optimizer state, and every loss after the resume."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from specon_examples import launch

pytestmark = [pytest.mark.torch, pytest.mark.slow]

COMPARE = """
import sys, numpy, torch
from specon.sdk.pytorch import TorchCheckpointer
load = TorchCheckpointer(None, directory=None).deserialize  # tensors and plain data only
a = load(open(sys.argv[1], "rb").read())
b = load(open(sys.argv[2], "rb").read())
def same(x, y):
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y)
    if isinstance(x, numpy.ndarray):
        return isinstance(y, numpy.ndarray) and numpy.array_equal(x, y)
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return type(x) is type(y) and len(x) == len(y) and all(map(same, x, y))
    return x == y
for key in ("step", "model", "optimizer", "scheduler", "rng", "extra"):
    assert same(a[key], b[key]), key
for key in a["rng"]:
    assert same(a["rng"][key], b["rng"][key]), key
# a perturbed copy must differ, or this comparison proves nothing
p = next(iter(b["model"].values())).clone(); p.view(-1)[0] += 1e-6
assert not same(a["model"], {**b["model"], next(iter(b["model"])): p})
print("same")
"""


@pytest.fixture(scope="module")
def python() -> str:
    found = launch.torch_python()
    if found is None:
        pytest.skip("no interpreter here imports torch (hack/test.d/30-torch.sh installs one)")
    return found


def run(python: str, model: str, work: Path, iterations: int,
        stop_at: int | None = None) -> tuple[int, list[dict]]:
    progress = work / "progress.jsonl"
    before = progress.read_text().count("\n") if progress.exists() else 0
    # log every 7 steps: the running mean crosses the checkpoint, so it must travel with it
    cmd = launch.command(python, model, "--iterations", str(iterations), "--threads", "1",
                         "--seed", "5", "--log-every", "7")
    env = launch.env(SPECON_PROGRESS_FILE=str(progress), SPECON_CHECKPOINT_DIR=str(work / "ck"))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    if stop_at is not None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if progress.exists() and progress.read_text().count('"progress"') >= stop_at:
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.01)
    code = proc.wait(timeout=600)
    lines = progress.read_text().splitlines()[before:]
    return code, [json.loads(line) for line in lines]


@pytest.mark.parametrize("model", ["vae", "mlp", "dynrnn"])
def test_sigterm_then_resume_equals_an_uninterrupted_run(tmp_path, python, model):
    iterations = 140
    straight_dir, stopped_dir = tmp_path / "straight", tmp_path / "stopped"
    straight_dir.mkdir()
    stopped_dir.mkdir()
    code, straight = run(python, model, straight_dir, iterations)
    assert code == 0
    code, first = run(python, model, stopped_dir, iterations, stop_at=6)
    assert code == 143, "the job must save and exit 143 after SIGTERM"
    stop = next(r for r in first if r["event"] == "stop")
    assert 0 < stop["step"] < iterations
    code, second = run(python, model, stopped_dir, iterations)
    assert code == 0
    resume = next(r for r in second if r["event"] == "resume")
    assert (resume["step"], resume["rejected"]) == (stop["step"], [])

    expected = {r["step"]: r["loss"] for r in straight if r["event"] == "progress"}
    after = [r for r in second if r["event"] == "progress"]
    assert after and after[0]["step"] > stop["step"]
    assert [(r["step"], r["loss"]) for r in after] == [(r["step"], expected[r["step"]])
                                                       for r in after]
    before = [r for r in first if r["event"] == "progress"]
    assert [(r["step"], r["loss"]) for r in before] == [(r["step"], expected[r["step"]])
                                                        for r in before]

    final = f"ckpt-{iterations:09d}.safetensors"
    done = subprocess.run([python, "-c", COMPARE, str(straight_dir / "ck" / final),
                           str(stopped_dir / "ck" / final)], capture_output=True, text=True,
                          timeout=300, check=False, env=launch.env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "same"


def test_resume_after_a_corrupt_newest_checkpoint_takes_the_previous(tmp_path, python):
    """Truncated newest checkpoint of a real job: it resumes from the one before, says so,
    and still finishes with the same losses as an uninterrupted run."""
    straight_dir, work = tmp_path / "straight", tmp_path / "work"
    straight_dir.mkdir()
    work.mkdir()
    code, straight = run(python, "mlp", straight_dir, 60)
    assert code == 0
    # first leg: checkpoints at 20 (periodic) and then 40 (periodic) before the job stops
    progress = work / "progress.jsonl"
    cmd = launch.command(python, "mlp", "--iterations", "60", "--threads", "1", "--seed", "5",
                         "--log-every", "7", "--checkpoint-every", "20")
    env = launch.env(SPECON_PROGRESS_FILE=str(progress), SPECON_CHECKPOINT_DIR=str(work / "ck"))
    subprocess.run([*cmd, "--no-final-checkpoint"], env=env, stdout=subprocess.DEVNULL,
                   check=True, timeout=600)
    newest = work / "ck" / "ckpt-000000060.safetensors"
    assert newest.exists()
    newest.write_bytes(newest.read_bytes()[:100])
    lines_before = progress.read_text().count("\n")
    subprocess.run([*cmd, "--iterations", "80"], env=env, stdout=subprocess.DEVNULL,
                   check=True, timeout=600)
    records = [json.loads(x) for x in progress.read_text().splitlines()[lines_before:]]
    resume = next(r for r in records if r["event"] == "resume")
    assert resume["name"] == "ckpt-000000040"
    assert resume["rejected"][0]["name"] == "ckpt-000000060"
    assert resume["rejected"][0]["reason"].startswith("size mismatch")
    expected = {r["step"]: r["loss"] for r in straight if r["event"] == "progress"}
    redone = [r for r in records if r["event"] == "progress" and r["step"] <= 60]
    assert redone and all(expected[r["step"]] == r["loss"] for r in redone)
