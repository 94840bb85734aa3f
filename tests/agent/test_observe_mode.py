"""Observe mode (issue 30, "try before you enforce"): the agent decides every limit as when
enforcing and writes none; each would-be change is a WouldLimitCPU Event and the
specon_agent_job_would_cpu_limit_cores gauge (docs/agent.md, "Observe mode"). On a real cgroup
with a real busy process, beside an enforcing agent given the same decision."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from test_actuators import own_cgroup  # noqa: F401  (the real-cgroup fixture)

from specon.sdk import THREADS_FILE
from specon_agent.actuators.base import Actuator, CpuLimit
from specon_agent.actuators.cgroup import CgroupActuator
from specon_agent.actuators.observe import ObserveActuator
from specon_agent.agent import Agent
from specon_agent.cpu import CpuMeter
from specon_agent.discovery import Target
from specon_agent.events import LOWERED, WOULD, LimitEvents, LimitNote
from specon_agent.loop_config import LoopConfig
from specon_agent.settings import load_settings

OWNER = CpuLimit(200_000, 100_000)  # the owner's 2 cores


def following(cid: str, actuator: Actuator, sent: list[dict[str, Any]],
              checkpoint_dir: Path | None = None) -> Agent:
    events = LimitEvents(sent.append, "node-a", window_s=60)
    agent = Agent(LoopConfig(node="node-a"), actuator, CpuMeter(), limit_events=events)
    agent.arrive(Target(cid=cid, namespace="team-a", pod="train-a", uid="uid-a",
                        container="main", checkpoint_dir=checkpoint_dir), agent.monotonic())
    return agent


def decide(agent: Agent, cid: str, cores: float) -> None:
    """The decision code's own entry (the quality step's override) gives the job ``cores``."""
    agent.control.set_qos_limits({cid: cores / agent.actuator.node_cpus}, floor=0.0)
    agent.apply(agent.monotonic())


def wait_for(sent: list[dict[str, Any]], n: int) -> None:
    deadline = time.monotonic() + 30
    while len(sent) < n:
        assert time.monotonic() < deadline, f"{n} Events expected, {len(sent)} posted"
        time.sleep(0.01)


def test_observe_mode_decides_the_limit_and_writes_none(
        own_cgroup, tmp_path: Path) -> None:  # noqa: F811
    cid, cgroups, _ = own_cgroup
    cgroups._write(cid, cgroups.read(cid), OWNER)

    sent: list[dict[str, Any]] = []
    observing = following(cid, ObserveActuator(CgroupActuator()), sent, checkpoint_dir=tmp_path)
    decide(observing, cid, 0.5)
    assert CgroupActuator().read(cid) == OWNER  # the kernel's quota is the owner's still
    assert observing.actuator.read(cid).cores == 0.5  # the loop sees the limit it decided
    assert not (tmp_path / THREADS_FILE).exists()  # nor is the job told to use fewer threads
    wait_for(sent, 1)
    [event] = sent
    assert event["reason"] == WOULD == "WouldLimitCPU"
    assert event["note"].startswith("observe mode: CPU limit of container main would be "
                                    "lowered from 2 cores to 0.5 cores (not written)")
    assert event["regarding"]["name"] == "train-a"

    observing._publish(observing.monotonic())
    text = generate_latest(observing.metrics.registry).decode()
    assert ('specon_agent_job_would_cpu_limit_cores{container="main",namespace="team-a",'
            'pod="train-a"} 0.5') in text
    assert 'specon_agent_job_cpu_limit_cores{' not in text  # nothing was set
    assert 'specon_agent_would_limit_writes_total{direction="down"} 1.0' in text
    assert 'specon_agent_limit_writes_total{direction="down"}' not in text
    [report] = observing.heartbeat(time.time()).jobs  # the manager hears the decision
    assert report.limit == pytest.approx(0.5 / observing.actuator.node_cpus)
    assert report.owner_limit_cores == 2.0

    observing.close()  # nothing to put back: nothing was written, and nothing is told
    observing.limit_events.close()  # type: ignore[union-attr]
    assert CgroupActuator().read(cid) == OWNER
    assert [e["reason"] for e in sent] == [WOULD]

    # The same decision, enforcing: written, and told as today.
    enforced: list[dict[str, Any]] = []
    enforcing = following(cid, CgroupActuator(), enforced)
    decide(enforcing, cid, 0.5)
    assert CgroupActuator().read(cid).cores == 0.5
    wait_for(enforced, 1)
    assert enforced[0]["reason"] == LOWERED
    enforcing.close()
    assert CgroupActuator().read(cid) == OWNER


def test_would_be_changes_merge_like_real_ones_and_keep_their_direction() -> None:
    def note(before: float, after: float) -> LimitNote:
        return LimitNote("ns", "p", "u", "main", before, after, observed=True)

    assert note(2, 1).reason == WOULD and note(1, 2).reason == WOULD
    assert "would be raised from 1 core to 2 cores" in note(1, 2).message(60)
    from specon_agent.events import Aggregator

    agg = Aggregator(window_s=60)
    assert agg.offer(note(2, 1), now=0) is not None
    assert agg.offer(note(1, 0.5), now=1) is None
    assert agg.offer(note(0.5, 1), now=2) is None
    [merged] = agg.due(now=60)
    assert merged.reason == WOULD
    assert merged.message(60) == ("observe mode: CPU limit of container main would be raised "
                                  "from 1 core to 1 core (not written) (2 changes within 60 s, "
                                  "merged)")


def test_enforce_is_the_default_and_observe_is_a_setting() -> None:
    assert load_settings([]).enforcement == "enforce"
    assert load_settings(["--enforcement", "observe"]).enforcement == "observe"
