"""Each job's predicted completion (specon_agent/eta.py): the real agent loop following a real
SDK progress file, its wall clock a fake the test steps, reports the ETA in its heartbeat and
its gauges, and none for a job that does not say where it ends."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from loopdoubles import Actuator, Meter

from specon.qos_annotations import QosSpec
from specon.sdk import Reporter
from specon_agent.agent import Agent
from specon_agent.discovery import Target
from specon_agent.eta import StepRate, eta_s, steps_eta_s
from specon_agent.loop_config import LoopConfig
from specon_agent.qos_tracker import JobQos

CID = "e" * 64


class Clock:
    """The wall clock, stepped by the test (fake: the loop's reading time is what is tested)."""

    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


def following(tmp_path: Path, total: int | None) -> tuple[Agent, Clock, Reporter]:
    clock = Clock()
    agent = Agent(LoopConfig(node="node-a", qos_window_s=30.0), Actuator(node_cpus=4),
                  Meter(), clock=clock)  # type: ignore[arg-type]
    path = tmp_path / "progress.jsonl"
    sdk = Reporter(path, stdout=io.StringIO())
    sdk.report(2.0, step=1)
    agent.arrive(Target(cid=CID, namespace="ns", pod="train", progress_path=path,
                        file_root=tmp_path, total_steps=total), 0.0)
    return agent, clock, sdk


def run(agent: Agent, clock: Clock, sdk: Reporter, steps: range, per_step_s: float) -> None:
    for k in steps:
        clock.t += per_step_s
        sdk.report(1.0, step=k)
        agent.poll()


def test_a_job_with_a_total_gets_its_eta_in_the_heartbeat_and_the_gauges(tmp_path: Path) -> None:
    agent, clock, sdk = following(tmp_path, total=1000)
    run(agent, clock, sdk, range(2, 5), 2.0)  # 6 s seen: under half the window, no rate yet
    assert agent.heartbeat(clock()).jobs[0].predicted_finish_s is None
    run(agent, clock, sdk, range(5, 101), 2.0)  # 0.5 step/s, at step 100
    eta = agent.heartbeat(clock()).jobs[0].predicted_finish_s
    assert eta == pytest.approx(900 / 0.5)
    agent._publish(0.0)
    labels = {"namespace": "ns", "pod": "train", "container": "main"}
    r = agent.metrics.registry
    assert r.get_sample_value("specon_agent_job_predicted_finish_seconds", labels) == \
        pytest.approx(1800)
    assert r.get_sample_value("specon_agent_job_predicted_completion_timestamp_seconds",
                              labels) == pytest.approx(clock() + 1800)
    run(agent, clock, sdk, range(101, 141), 1.0)  # twice as fast now: the ETA follows
    assert agent.heartbeat(clock()).jobs[0].predicted_finish_s == pytest.approx(860)


def test_a_job_that_says_nothing_of_its_end_has_no_eta(tmp_path: Path) -> None:
    agent, clock, sdk = following(tmp_path, total=None)
    run(agent, clock, sdk, range(2, 60), 1.0)
    assert agent.heartbeat(clock()).jobs[0].predicted_finish_s is None
    agent._publish(0.0)
    assert agent.metrics.registry.get_sample_value(
        "specon_agent_job_predicted_completion_timestamp_seconds",
        {"namespace": "ns", "pod": "train", "container": "main"}) is None


def test_a_stalled_job_and_counted_steps_have_no_eta() -> None:
    rate = StepRate(30.0)
    for t in range(40):
        rate.add(float(t), 10.0)  # no step for 40 s
    assert steps_eta_s(rate, 100) is None
    counted = StepRate(30.0)
    for t in range(40):
        counted.add(float(t), float(t + 1), counted=True)
    assert counted.rate() == pytest.approx(1.0)
    assert steps_eta_s(counted, 100) is None  # counted from zero again after a restart


def test_a_job_that_stops_at_its_target_ends_there_if_that_comes_first() -> None:
    rate = StepRate(30.0)
    q = JobQos(QosSpec(target_loss=0.5, stop_at_target=True, total_steps=10_000), created=0.0)
    for k in range(1, 61):
        t = float(k)
        rate.add(t, float(k))
        q.add(t, [k], [0.3 + 2.0 * 0.97 ** k])  # reaches 0.5 around step 80
        q.sample(t, None)
    q.judge(60.0, best_cores=1.0)
    eta = eta_s(rate, 10_000, q)
    assert eta is not None and 5 < eta < 200  # not the 9,940 s to its last step
    q.reached_at = 61.0
    assert eta_s(rate, 10_000, q) == 0.0


def test_the_benchmark_replays_records_as_the_agent_reads_them() -> None:
    """benchmarks/eta_error.py's replay: a job at a steady 10 steps/s from 5 s after its start
    to its end at 105 s (1000 steps) is given its real end, to within a poll; at 10% of its run
    it has stepped for 5.5 s only, under half the 30 s window: no ETA."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from eta_error import Run, replay

    records = [(5.0 + k / 10, k) for k in range(1, 1001, 10)]
    points = replay(Run("steady", 1000, 0.0, 105.0, records), poll_s=2.0, window_s=30.0,
                    points=(0.1, 0.5, 0.75))
    assert points[0].eta_s is None
    for p in points[1:]:
        assert p.eta_s is not None and p.error_pct is not None
        assert abs(p.eta_s - p.left_s) <= 3.0 and p.error_pct < 10
