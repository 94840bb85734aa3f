"""The agent's limit Events against the real API server: a pod on a KWOK node, the agent
changing its limit through the resize actuator, and the Events read back (docs/agent.md,
"Events")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from planelib import Plane
from planemanager import wait_for
from test_resize_plane import actuator, pod, running

from specon_agent.__main__ import build
from specon_agent.agent import Agent
from specon_agent.cpu import CpuMeter
from specon_agent.discovery import Target
from specon_agent.events import CONTROLLER, LimitEvents, LimitNote, kube_sender
from specon_agent.loop_config import LoopConfig
from specon_agent.settings import AgentSettings

pytestmark = pytest.mark.plane

CID = "containerd://" + "e" * 64


def pod_on_node(plane: Plane, ns: str, name: str) -> str:
    """A running pod with a 2-core limit on a fresh KWOK node; its uid."""
    node = plane.add_nodes(1, prefix=f"ev{ns[-6:]}")[0]
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(pod(name, node)))
    wait_for(f"{name} running", lambda: running(plane, ns, name))
    got = json.loads(plane.kubectl("get", "pod", "-n", ns, name, "-o", "json").stdout)
    return str(got["metadata"]["uid"])


def agent_events(plane: Plane, ns: str) -> list[dict[str, Any]]:
    out = plane.kubectl("get", "events.v1.events.k8s.io", "-n", ns, "-o", "json").stdout
    items = [e for e in json.loads(out)["items"] if e.get("reportingController") == CONTROLLER]
    return sorted(items, key=lambda e: e["eventTime"])


def test_each_limit_change_the_agent_makes_is_an_event_on_the_pod(
    plane: Plane, plane_namespace: str
) -> None:
    ns = plane_namespace
    uid = pod_on_node(plane, ns, "ev1")
    events = LimitEvents(kube_sender(plane.api_client()), "node-ev", window_s=0)
    agent = Agent(LoopConfig(node="node-ev"), actuator(plane), CpuMeter(), limit_events=events)
    target = Target(cid=CID, namespace=ns, pod="ev1", uid=uid, container="main")
    agent.arrive(target, now=0.0)  # the share rule gives a lone new job the node: 2 -> 4 cores
    agent.control.set_qos_limits({CID: 0.125}, floor=0.125)  # a target's limit: 0.5 cores
    agent.apply(now=1.0)
    agent.close()  # the owner's 2 cores back
    events.close()
    got = agent_events(plane, ns)
    assert [(e["reason"], e["note"]) for e in got] == [
        ("CPULimitRaised", "CPU limit of container main raised from 2 cores to 4 cores; "
         "job PC; set by the node share rule progress"),
        ("CPULimitLowered", "CPU limit of container main lowered from 4 cores to 0.5 cores; "
         "job PC; set for quality targets and deadlines (docs/qos.md)"),
        ("CPULimitRestored", "CPU limit of container main restored from 0.5 cores to 2 cores; "
         "job PC; the agent is stopping")]
    for e in got:
        assert e["regarding"]["uid"] == uid and e["regarding"]["name"] == "ev1"
        assert e["regarding"]["kind"] == "Pod" and e["action"] == "Throttle"
        assert e["reportingInstance"] == "node-ev" and e["type"] == "Normal"
    described = plane.kubectl("describe", "pod", "-n", ns, "ev1").stdout
    assert "CPULimitLowered" in described and "specon.io/agent" in described


def test_a_burst_of_changes_is_a_bounded_number_of_events(
    plane: Plane, plane_namespace: str
) -> None:
    ns = plane_namespace
    uid = pod_on_node(plane, ns, "ev2")
    events = LimitEvents(kube_sender(plane.api_client()), "node-ev", window_s=3600)
    for i in range(50):  # a flapping limit
        before, after = (2.0, 1.0) if i % 2 == 0 else (1.0, 2.0)
        events.offer(LimitNote(ns, "ev2", uid, "main", before, after, category="WC"))
    events.close()  # cuts the window short: posts the merged rest
    got = agent_events(plane, ns)
    assert [e["reason"] for e in got] == ["CPULimitLowered", "CPULimitRaised"]
    assert got[1]["note"] == ("CPU limit of container main raised from 1 core to 2 cores; "
                              "job WC (49 changes within 3600 s, merged)")


def test_the_agent_posts_events_in_cluster_mode_unless_turned_off(
    plane: Plane, tmp_path: Any
) -> None:
    given = {"mode": "cluster", "manager_url": "http://127.0.0.1:9", "actuator": "resize",
             "kubeconfig": plane.kubeconfig, "node_cpus": 4, "metrics_port": 0,
             "node_name": "node-ev"}
    agent, _ = build(AgentSettings(**given))
    assert agent.limit_events is not None and agent.limit_events.instance == "node-ev"
    agent.limit_events.close()
    agent, _ = build(AgentSettings(**given, events=False))
    assert agent.limit_events is None
