"""Issue 29 (second round), item 1, on real files through the agent's own code path (the pod's
JSON through discovery, the arrival, its polls, the QoS pass, the limit write's thread hint,
the manager's checkpoint request and the heartbeat's checkpoint proof): a pod in namespace
``evil`` names the folder of a job in namespace ``victim`` in its ``specon.io/checkpoint-dir``
and ``specon.io/progress-file`` annotations, states a target loss it then logs, with
stop-at-target. Before, the annotations resolved against the whole shared root: the agent
wrote ``{"exit": true, "done": true}`` and a thread hint into the victim's folder and the
victim's real SDK job saved and exited 0. Now every path resolves beneath
``<root>/<pod namespace>/``: nothing outside the acting job's own folder is written."""

from __future__ import annotations

import io
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specon.sdk import SAVED_FILE, Checkpointer, Reporter
from specon.wire import CheckpointRequest, JobReport
from specon_agent.actuators.base import CpuLimit, LimitChange
from specon_agent.actuators.cgroup import CgroupActuator
from specon_agent.agent import Agent
from specon_agent.cpu import CpuMeter
from specon_agent.discovery import Arrived, pod_targets
from specon_agent.loop_config import LoopConfig
from specon_agent.safefs import ConfinementError
from specon_agent.tenancy import pod_path

LABEL = "specon.io/training"
CID = "e" * 64
T0 = 1_800_000_000.0


class Actuator(CgroupActuator):
    """No cgroup here: every limit 'written' is reported as a change to half a core, so the
    agent's real limit path writes the job's thread hint."""

    def apply_many(self, fractions, floor=0.0):  # type: ignore[no-untyped-def]
        return [LimitChange(cid, CpuLimit(None), CpuLimit(50_000)) for cid in fractions], {}


def snapshot(root: Path, skip: Path | None = None) -> dict[str, tuple[bytes, int, int]]:
    """Every file beneath ``root`` (but ``skip``) with its bytes, mtime and inode."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if skip is not None and (p == skip or skip in p.parents):
                continue
            st = p.lstat()
            out[str(p.relative_to(root))] = (p.read_bytes(), st.st_mtime_ns, st.st_ino)
    return out


def victim_job(shared: Path) -> tuple[Checkpointer, Path]:
    """A real SDK job of namespace ``victim`` with a verified checkpoint and losses logged."""
    folder = shared / "victim" / "runs" / "v"
    folder.mkdir(parents=True)
    ckpt = Checkpointer(folder, handle_sigterm=False,
                        reporter=Reporter(folder / "progress.jsonl", io.StringIO()))
    for step in range(1, 6):
        ckpt.reporter.report(0.5, step=step)
        ckpt.step_end(step, {"w": step})
    ckpt.save({"w": 5}, 5)
    assert (folder / SAVED_FILE).exists()
    return ckpt, folder


def evil_pod(log_root: Path, ckpt_dir: str) -> dict[str, Any]:
    """The attacker's pod: it names ``ckpt_dir`` and a progress file in it, states a target
    loss (10) with stop-at-target, and logs losses under it (its own CRI log)."""
    uid = "uid-evil"
    logs = log_root / f"evil_thief_{uid}" / "main"
    logs.mkdir(parents=True)
    (logs / "0.log").write_text("".join(
        f"2026-11-24T10:00:0{k}.000000000Z stdout F step={k} loss=0.5\n" for k in range(1, 9)))
    return {
        "metadata": {
            "namespace": "evil", "name": "thief", "uid": uid,
            "creationTimestamp": "2026-11-24T10:00:00Z",
            "labels": {LABEL: "true", "specon.io/migratable": "true"},
            "annotations": {"specon.io/checkpoint-dir": ckpt_dir,
                            "specon.io/progress-file": f"{ckpt_dir}/progress.jsonl",
                            "specon.io/target-loss": "10",
                            "specon.io/stop-at-target": "true"}},
        "spec": {"containers": [{"name": "main"}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "main", "containerID": f"containerd://{CID}", "restartCount": 0,
             "state": {"running": {}}}]},
    }


def act_for(shared: Path, log_root: Path, ckpt_dir: str) -> tuple[Agent, JobReport]:
    """Everything the agent does for the evil pod's job that touches files; its report."""
    [target] = pod_targets(evil_pod(log_root, ckpt_dir), LABEL, log_root, shared)
    agent = Agent(LoopConfig(node="node-a", qos_interval_s=1.0), Actuator(node_cpus=2),
                  CpuMeter(), clock=lambda: T0)
    agent.handle(Arrived(target), T0)  # arrival: its files read, a limit and a thread hint
    agent._ask_checkpoint(CheckpointRequest(namespace="evil", pod="thief", id="mig-1"))
    agent._qos_tick(T0 + 1)  # its target reached: asked to save and stop as done
    [report] = agent.heartbeat(T0 + 2).jobs  # the checkpoint proof reads its folder
    job = agent.jobs[CID]
    assert job.qos is not None and job.qos.stop_asked
    assert job.source is not None and job.source.last_loss == 0.5
    return agent, report


def refusals(agent: Agent, what: str) -> float:
    return float(agent.metrics.confinement_refusals.labels(what)._value.get())


@pytest.mark.parametrize("given", ["victim/runs/v", "/victim/runs/v", "/evil/../victim/runs/v",
                                   "../victim/runs/v"])
def test_a_pod_cannot_make_the_agent_write_into_another_namespaces_folder(
    tmp_path: Path, given: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    shared, log_root = tmp_path / "shared", tmp_path / "pods"
    victim, folder = victim_job(shared)
    (shared / "evil").mkdir()
    before = snapshot(shared, skip=shared / "evil")

    agent, report = act_for(shared, log_root, given)

    # No write outside the acting job's own folder: every file beneath the shared root but
    # the evil namespace's folder is as it was (bytes, mtime, inode), and nothing was added.
    assert snapshot(shared, skip=shared / "evil") == before
    assert not (folder / "request.json").exists() and not (folder / "threads.json").exists()
    # Nor was anything read from there: the job's loss is its own log's, not the victim's
    # progress file, and its heartbeat reports no checkpoint (the victim's verifies).
    assert report.checkpoint is None
    assert agent.jobs[CID].source is not None
    assert agent.jobs[CID].source.path == log_root / "evil_thief_uid-evil" / "main" / "0.log"
    # The victim's real SDK job is not stopped: its next step boundary just returns.
    victim.step_end(6, {"w": 6})
    if given.startswith("/"):  # from the shared root, outside /evil/: refused and said
        assert refusals(agent, "checkpoint") == 1 and refusals(agent, "progress") == 1
        assert "specon.io/checkpoint-dir" in caplog.text and "refused" in caplog.text
    elif ".." in given:
        assert refusals(agent, "checkpoint") == 1 and refusals(agent, "progress") == 1
    else:  # relative: the evil namespace's own folder, where it names nothing that exists
        assert agent.jobs[CID].target.checkpoint_dir == shared / "evil" / "victim" / "runs" / "v"


@pytest.mark.parametrize("given", ["runs/e", "/evil/runs/e"])
def test_the_agent_writes_into_the_acting_jobs_own_folder(tmp_path: Path, given: str) -> None:
    """The same pod naming its own folder (relative, or from the shared root beneath /evil/):
    the stop request and the thread hint are written there, and nowhere else."""
    shared, log_root = tmp_path / "shared", tmp_path / "pods"
    victim_job(shared)
    own = shared / "evil" / "runs" / "e"
    own.mkdir(parents=True)
    mine = Reporter(own / "progress.jsonl", io.StringIO())
    for step in range(1, 9):
        mine.report(0.5, step=step)
    before = snapshot(shared, skip=own)

    agent, _report = act_for(shared, log_root, given)

    assert snapshot(shared, skip=own) == before
    assert json.loads((own / "request.json").read_text())["done"] is True
    assert json.loads((own / "threads.json").read_text())["threads"] == 1
    assert refusals(agent, "checkpoint") == 0 and refusals(agent, "progress") == 0


@given(st.text(alphabet=st.sampled_from("/.abvictm-_\x00 ~\\"), max_size=30))
@settings(max_examples=500, deadline=None)
def test_any_annotation_resolves_beneath_the_namespace_folder_or_is_refused(given_path):
    """Whatever a pod writes in its annotation: either a path beneath ``root/<its namespace>``
    with no ``..``, or a ConfinementError; never another exception."""
    root = Path("/shared")
    try:
        path = pod_path(root, "evil", given_path)
    except ConfinementError:
        return
    rel = path.relative_to(root / "evil")
    assert ".." not in rel.parts
