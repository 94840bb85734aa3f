"""The agent's half of the thread hint (docs/training-contract.md §8): after a limit change it
writes threads.json atomically into the job's checkpoint directory, only when the count changes,
and a real SDK Checkpointer in that directory follows it."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

from specon.sdk import THREADS_FILE, Checkpointer, Reporter
from specon_agent.actuators.cgroup import CgroupActuator
from specon_agent.agent import Agent
from specon_agent.cpu import CpuMeter
from specon_agent.discovery import Target
from specon_agent.followed import FollowedJob
from specon_agent.loop_config import LoopConfig
from specon_agent.threads import write_thread_hint

CID = "d" * 64


def agent_following(directory: Path | None, node_cpus: float = 8) -> Agent:
    agent = Agent(LoopConfig(node="node-a"), CgroupActuator(node_cpus=node_cpus), CpuMeter())
    target = Target(cid=CID, namespace="ns", pod="train-a", uid="uid-a",
                    checkpoint_dir=directory, migratable=directory is not None)
    agent.jobs[CID] = FollowedJob(target, None)
    return agent


def test_the_hint_follows_each_limit_change_and_the_job_applies_it(tmp_path: Path) -> None:
    agent = agent_following(tmp_path)
    applied: list[int] = []
    job = Checkpointer(tmp_path, handle_sigterm=False, on_threads=applied.append,
                       reporter=Reporter(stdout=io.StringIO()))
    job.thread_hint._cores = lambda: 8  # type: ignore[union-attr]  # this box has fewer
    agent._hint_threads(CID, 2.96)  # what apply() calls after a write of 2.96 cores
    assert json.loads((tmp_path / THREADS_FILE).read_text()) == {
        "threads": 3, "limit_cores": 2.96, "visible_cores": 8}
    job.step_end(1, {"w": 1})
    agent._hint_threads(CID, 0.4)
    job.step_end(2, {"w": 2})
    agent._hint_threads(CID, None)  # unlimited again: every core it sees
    job.step_end(3, {"w": 3})
    assert applied == [3, 1, 8]
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    assert (tmp_path / THREADS_FILE).stat().st_mode & 0o777 == 0o644  # readable by the job


def test_an_unchanged_count_is_not_written_again(tmp_path: Path) -> None:
    agent = agent_following(tmp_path)
    agent._hint_threads(CID, 2.0)
    before = (tmp_path / THREADS_FILE).stat().st_ino
    agent._hint_threads(CID, 2.5)  # still 2 threads
    assert (tmp_path / THREADS_FILE).stat().st_ino == before
    agent._hint_threads(CID, 3.0)
    assert (tmp_path / THREADS_FILE).stat().st_ino != before


def test_no_checkpoint_dir_no_hint_and_a_failed_write_is_logged(tmp_path: Path, caplog) -> None:
    agent_following(None)._hint_threads(CID, 1.0)  # nowhere to write: nothing happens
    caplog.set_level(logging.WARNING)
    assert write_thread_hint(tmp_path / "missing", 1.0, 8) is None
    assert "cannot write the thread hint" in caplog.text
    agent = agent_following(tmp_path / "missing")
    agent._hint_threads(CID, 1.0)
    assert agent.jobs[CID].threads_hint is None  # tried again at the next change
