"""The agent's side of quality targets and deadlines: reading them from labels and
annotations, predicting from records, judging, and the limits a node gets."""

from __future__ import annotations

import io
import json
import math

import pytest

from specon.core.flowcon import FlowConParams
from specon.core.node import NodeController
from specon.core.urgency import qos_limits
from specon.qos_annotations import QosSpec, parse_timestamp
from specon.sdk import Checkpointer, Reporter
from specon_agent.actuators.cgroup import CgroupActuator
from specon_agent.agent import Agent
from specon_agent.cpu import CpuMeter
from specon_agent.discovery import Target, pod_targets, read_qos
from specon_agent.followed import FollowedJob
from specon_agent.loop_config import LoopConfig
from specon_agent.qos_tracker import JobQos

T0 = 1_800_000_000.0


def test_creation_times_as_engines_write_them():
    assert parse_timestamp("2026-11-21T23:40:01.123456789Z").timestamp() == 1795304401.123456
    assert parse_timestamp("2026-11-21T23:40:01Z").timestamp() == 1795304401.0
    assert parse_timestamp("2026-11-21T23:40:01+01:00").timestamp() == 1795304401.0 - 3600
    for bad in (None, "", "yesterday", "2026-11-21T23:40:01"):
        assert parse_timestamp(bad) is None


def test_read_qos_from_labels_or_annotations():
    spec, problem, created = read_qos({"specon.io/deadline": "10m",
                                       "specon.io/total-steps": "600"}, "2026-11-21T23:40:01Z")
    assert problem is None and spec == QosSpec(deadline_s=600.0, total_steps=600)
    assert created == 1795304401.0
    assert read_qos({"other": "x"}, "2026-11-21T23:40:01Z")[:2] == (None, None)
    spec, problem, _ = read_qos({"specon.io/deadline": "soon"}, "2026-11-21T23:40:01Z")
    assert spec is None and problem is not None and "specon.io/deadline: 'soon'" in problem
    spec, problem, _ = read_qos({"specon.io/target-loss": "0.1"}, None)
    assert spec is None and problem is not None and "creation time" in problem


def test_pod_annotations_reach_the_target(tmp_path):
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1",
                        "creationTimestamp": "2026-11-21T23:40:01Z",
                        "labels": {"specon.io/training": "true"},
                        "annotations": {"specon.io/target-loss": "0.25"}},
           "status": {"phase": "Running", "containerStatuses": [
               {"name": "main", "containerID": "containerd://abc", "state": {"running": {}}}]}}
    [t] = pod_targets(pod, "specon.io/training", tmp_path, None)
    assert t.qos == QosSpec(target_loss=0.25) and t.created == 1795304401.0
    pod["metadata"]["annotations"] = {"specon.io/target-loss": "low"}
    [t] = pod_targets(pod, "specon.io/training", tmp_path, None)
    assert t.qos is None and t.qos_error is not None and "not a number" in t.qos_error


def feed_deadline_job(q: JobQos, rate: float, cores: float, until: float) -> None:
    """Records every 2 s at ``rate`` steps/s, CPU at ``cores``, sampled every 10 s."""
    t, step = T0, 0
    while t <= until:
        q.add(t, [step], [1.0 / (1 + step)])
        if int(t - T0) % 10 == 0:
            q.sample(t, int((t - T0) * cores * 1e9))
        t += 2.0
        step = int((t - T0) * rate)


def test_deadline_job_late_at_its_share_is_at_risk_and_pressed():
    # 1000 steps by T0+500 s; 1 step/s at half a core: 2 steps/s per core
    q = JobQos(QosSpec(deadline_s=500.0, total_steps=1000), created=T0, window_s=30)
    feed_deadline_job(q, rate=1.0, cores=0.5, until=T0 + 100)
    a = q.judge(T0 + 100, best_cores=2.0)
    assert a.state == "at-risk"
    assert a.predicted_s is not None and math.isclose(a.predicted_s, 900, rel_tol=0.02)
    assert a.slack_s is not None and a.slack_s < 0
    # 900 steps in 0.75 * 400 s at 2 steps/s per core: 1.5 cores
    assert a.need_cores is not None and math.isclose(a.need_cores, 1.5, rel_tol=0.02)
    assert q.finish_s() is not None and math.isclose(q.finish_s(), 900, rel_tol=0.02)
    calm = JobQos(QosSpec(deadline_s=7200.0, total_steps=1000), created=T0)
    feed_deadline_job(calm, rate=1.0, cores=0.5, until=T0 + 100)
    b = calm.judge(T0 + 100, best_cores=2.0)
    assert b.state == "on-track" and b.need_cores is not None and b.need_cores < 0.1
    lim = qos_limits({"late": a, "calm": b, "plain": None}, 2.0, 0.05)
    assert lim == {"late": 1.0, "calm": 0.05, "plain": None}


def test_target_reached_is_said_once_the_recent_losses_are_below_it():
    q = JobQos(QosSpec(target_loss=0.2), created=T0)
    for k in range(1, 30):
        q.add(T0 + k, [k * 10], [0.1 + math.exp(-k * 10 / 200)])
        q.sample(T0 + k, int(k * 1e9))
    assert q.judge(T0 + 30, best_cores=2.0).state == "on-track" and q.reached_at is None
    for k in range(30, 33):
        q.add(T0 + k, [k * 10], [0.15])
    assert q.reached_at is None  # the mean of the last five is still above 0.2
    q.add(T0 + 33, [330], [0.15])
    assert q.reached_at == T0 + 33
    assert q.judge(T0 + 35, best_cores=2.0).state == "reached"
    assert q.target_s() == (None, None, None)


def test_target_prediction_in_time():
    q = JobQos(QosSpec(target_loss=0.2), created=T0)
    for k in range(1, 30):  # steps 10..290 of a curve that reaches 0.2 at step 460
        q.add(T0 + k, [k * 10], [0.1 + math.exp(-k * 10 / 200)])
        q.sample(T0 + k, int(k * 1e9))
    q.judge(T0 + 30, best_cores=2.0)
    est, low, high = q.target_s()
    truth = (200 * math.log(10) - 290) / 10  # seconds at 10 steps/s
    assert est is not None and low is not None and high is not None
    assert low <= est <= high and 0.5 * truth < est < 1.5 * truth, (low, est, high, truth)


def test_control_uses_qos_limits_over_flowcon():
    c = NodeController(FlowConParams(alpha=0.01, itval_s=60, beta=1.0), 0.01)
    c.arrive("a", 0.0, 0)
    c.arrive("b", 0.0, 0)
    assert c.limits == {"a": 1.0, "b": 1.0} and c.floor == 0.5
    assert c.set_qos_limits({"a": 0.05, "gone": 0.3}, 0.05)
    assert c.limits == {"a": 0.05, "b": 1.0} and c.floor == 0.05
    assert not c.set_qos_limits({"a": 0.05}, 0.05)
    c.depart("a", 1.0)
    assert c.limits == {"b": 1.0} and c.floor == 1.0


def test_agent_reports_predictions_and_stops_a_job_at_its_target(tmp_path):
    """The agent's QoS pass on one job, with a real SDK Checkpointer honouring the request:
    the heartbeat carries the target, the state and the predictions; once the target is
    reached the job is asked to save and stop as done, and exits 0 after a verified save."""
    cid = "d" * 64
    agent = Agent(LoopConfig(node="n", qos_window_s=10), CgroupActuator(node_cpus=2), CpuMeter())
    spec = QosSpec(target_loss=0.2, deadline_s=3600.0, stop_at_target=True)
    target = Target(cid=cid, namespace="ns", pod="p", checkpoint_dir=tmp_path, qos=spec,
                    created=T0)
    agent.jobs[cid] = FollowedJob(target, None, qos=JobQos(spec, T0, window_s=10))
    agent.control.arrive(cid, T0, None)
    q = agent.jobs[cid].qos
    assert q is not None
    for k in range(1, 30):
        q.add(T0 + k, [k * 10], [0.1 + math.exp(-k * 10 / 200)])
        if k % 5 == 0:
            agent._qos_tick(T0 + k)
    [rep] = agent.heartbeat(T0 + 30).jobs
    assert rep.target_loss == 0.2 and rep.deadline == T0 + 3600 and not rep.target_reached
    assert rep.qos == "on-track" and rep.predicted_target_s is not None
    assert rep.predicted_target_low_s is not None and rep.predicted_target_high_s is not None
    assert rep.slack_s is not None and rep.slack_s > 0
    agent._publish(T0 + 30)
    key = ("ns", "p", "main")
    assert agent.metrics.job_qos.labels(*key, "on-track")._value.get() == 1
    assert agent.metrics.job_predicted_target.labels(*key, "estimate")._value.get() > 0

    for k in range(30, 36):
        q.add(T0 + k, [k * 10], [0.15])
    agent._qos_tick(T0 + 36)
    [rep] = agent.heartbeat(T0 + 36).jobs
    assert rep.target_reached and rep.qos == "reached"
    assert json.loads((tmp_path / "request.json").read_text())["done"] is True
    job = Checkpointer(tmp_path, handle_sigterm=False,
                       reporter=Reporter(tmp_path / "progress.jsonl", io.StringIO()))
    with pytest.raises(SystemExit) as exc:
        job.step_end(360, {"w": 1})
    assert exc.value.code == 0


@pytest.mark.parametrize(("policy", "over_shares", "limited"), [
    ("progress", False, False),  # as shipped: the progress rule decides the CPU
    ("progress", True, True),  # the chart's agent.qosOverShares
    ("paper", False, True),  # over FlowCon's limits
])
def test_qos_limits_are_laid_over_flowcon_and_over_a_share_rule_only_when_asked(
        policy: str, over_shares: bool, limited: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The late job is judged at-risk and reported so under every policy; only where the QoS
    limits are laid over the node's (specon.core.node.qos_limits_over) does it get the node
    and the calm one the floor. Laid over the progress rule they took a job of an overloaded
    node to 4.3 times its default completion (docs/qos.md)."""
    agent = Agent(LoopConfig(node="n", qos_window_s=30, policy=policy,
                             qos_over_shares=over_shares),
                  CgroupActuator(node_cpus=2), CpuMeter())
    for cid, deadline in (("late", 700.0), ("calm", 7200.0)):
        spec = QosSpec(deadline_s=deadline, total_steps=1000)
        agent.jobs[cid] = FollowedJob(Target(cid=cid, namespace="ns", pod=cid, qos=spec,
                                             created=T0), None,
                                      qos=JobQos(spec, T0, window_s=30))
        agent.control.arrive(cid, T0, None)
        q = agent.jobs[cid].qos
        assert q is not None
        feed_deadline_job(q, rate=1.0, cores=0.5, until=T0 + 100)
    # the CPU the jobs used, as the meter reads it from their cgroups: half a core each
    monkeypatch.setattr(agent.meter, "usage_ns", lambda cid: int(100 * 0.5 * 1e9))
    agent._qos_tick(T0 + 100)
    states = {r.pod: r.qos for r in agent.heartbeat(T0 + 100).jobs}
    assert states == {"late": "at-risk", "calm": "on-track"}
    # the late job may use the node, the calm one what the late one leaves (one core)
    assert agent.control.qos_limits == ({"late": 1.0, "calm": 0.5} if limited else {})
