"""A job whose loss stays NaN or inf (issue 32): read from its real progress file (written by
the SDK's Reporter) through the agent's poll, categorised by the core's rule: after
NO_VALID_LOSS_INTERVALS intervals with no finite loss it is watching, not progressing, and its
heartbeat reports no stale growth. A job whose loss falls beside it stays progressing."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
from loopdoubles import Actuator, Meter

from specon.core.categorize import Category
from specon.defaults import NO_VALID_LOSS_INTERVALS
from specon.sdk.progress import Reporter
from specon_agent.agent import Agent
from specon_agent.discovery import Arrived, Target
from specon_agent.loop_config import LoopConfig

BAD, GOOD = "b" * 64, "g" * 64
INTERVAL = 60.0

def test_a_job_whose_loss_stays_nan_is_watching_after_n_intervals(tmp_path: Path) -> None:
    meter = Meter()
    agent = Agent(LoopConfig(node="n", interval_s=INTERVAL, poll_s=1.0), Actuator(node_cpus=2),
                  meter)  # type: ignore[arg-type]
    # the test's timeline: a poll at each call, a categorisation every INTERVAL
    agent.next_poll, agent.next_cat, agent.next_qos = 0.0, INTERVAL, math.inf
    reporters: dict[str, Reporter] = {}
    for cid, pod in ((BAD, "diverged"), (GOOD, "healthy")):
        path = tmp_path / pod / "progress.jsonl"
        path.parent.mkdir()
        path.write_text("")
        reporters[cid] = Reporter(path, stdout=io.StringIO())
        meter.ns[cid] = 0
        agent.handle(Arrived(Target(cid=cid, namespace="ns", pod=pod, progress_path=path)),
                     now=0.0)
    t, step = 0.0, 0

    def interval(losses: dict[str, list[float]]) -> dict[str, Category]:
        nonlocal t, step
        for k in range(10):
            step += 1
            for cid, values in losses.items():
                reporters[cid].report(values[k], step=step)
        t += INTERVAL
        for cid in losses:
            meter.ns[cid] = int(t * 1e9)
        agent.step(t)
        return {cid: agent.control.jobs[cid].cat.category for cid in losses}

    for i in range(3):  # both learn: progressing
        falling = [10.0 - i - k / 10 for k in range(10)]
        cats = interval({BAD: falling, GOOD: falling})
    assert cats == {BAD: Category.PROGRESSING, GOOD: Category.PROGRESSING}
    assert agent.control.jobs[BAD].growth is not None
    for i in range(NO_VALID_LOSS_INTERVALS):  # BAD's loss is NaN (and inf) from now on
        cats = interval({BAD: [math.nan] * 9 + [math.inf],
                         GOOD: [7.0 - i - k / 10 for k in range(10)]})
        if i < NO_VALID_LOSS_INTERVALS - 1:
            assert cats[BAD] is Category.PROGRESSING, i
    assert cats == {BAD: Category.WATCHING, GOOD: Category.PROGRESSING}
    reports = {j.pod: j for j in agent.heartbeat(t).jobs}
    assert reports["diverged"].category is Category.WATCHING
    assert reports["diverged"].growth is None
    assert reports["diverged"].loss == pytest.approx(7.1)  # its last finite loss
    assert reports["healthy"].category is Category.PROGRESSING
    assert reports["healthy"].growth is not None
    for r in reporters.values():
        r.close()
