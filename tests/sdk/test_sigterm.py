"""SIGTERM to a real job process: it finishes the step, saves, exits 143, and resumes from
exactly the step it stopped at (plain state, no torch needed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

JOB = textwrap.dedent("""
    import random, time
    from specon.sdk import Checkpointer, report
    ckpt = Checkpointer()
    restored = ckpt.resume()
    state = restored.state if restored else {"x": 100.0, "rng": None}
    if state["rng"] is not None:
        random.setstate(state["rng"])
    else:
        random.seed(3)
    for step in range((restored.step if restored else 0) + 1, 400 + 1):
        state["x"] -= 0.01 * state["x"] + random.gauss(0, 0.1)
        time.sleep(0.005)
        report(state["x"] ** 2, step=step)
        ckpt.step_end(step, lambda: {"x": state["x"], "rng": random.getstate()})
""")


def run_job(tmp_path, stop_after: int | None) -> tuple[int, list[dict]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT),
               SPECON_CHECKPOINT_DIR=str(tmp_path / "ckpt"),
               SPECON_PROGRESS_FILE=str(tmp_path / "progress.jsonl"))
    proc = subprocess.Popen([sys.executable, "-c", JOB], env=env, stdout=subprocess.DEVNULL)
    if stop_after is not None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            path = tmp_path / "progress.jsonl"
            if path.exists() and path.read_text().count('"progress"') >= stop_after:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    recs = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    return code, recs


def test_sigterm_saves_exits_143_and_resume_matches_an_uninterrupted_run(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    code, straight = run_job(tmp_path / "a", None)
    assert code == 0
    code, first = run_job(tmp_path / "b", stop_after=30)
    assert code == 143
    stop = next(r for r in first if r["event"] == "stop")
    last_reported = [r for r in first if r["event"] == "progress"][-1]["step"]
    assert stop["step"] == last_reported  # no finished step lost
    saved = json.loads((tmp_path / "b" / "ckpt" / "saved.json").read_text())
    assert (saved["step"], saved["reason"]) == (stop["step"], "sigterm")
    code, both = run_job(tmp_path / "b", None)
    assert code == 0
    both = both[len(first):]  # the progress file is appended to across runs
    resume = next(r for r in both if r["event"] == "resume")
    assert resume["step"] == stop["step"] and resume["rejected"] == []
    losses = {r["step"]: r["loss"] for r in straight if r["event"] == "progress"}
    resumed = [r for r in both if r["event"] == "progress"]
    assert resumed[0]["step"] == stop["step"] + 1
    assert all(losses[r["step"]] == r["loss"] for r in resumed)
    assert [r["step"] for r in resumed][-1] == 400
