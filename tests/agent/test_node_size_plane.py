"""The agent's node size in cluster mode: its Node's allocatable CPUs, not the host's count
(a node whose kubelet reserves CPUs, or a node capped below its host, lets its pods use less;
the kernel refuses a limit above the pods' parent quota: found by benchmarks/cluster_ab.py on
capped real nodes, where every agent took the host's 2 CPUs). Against the real API server."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
from planelib import Plane

from specon.cpu_speed import MAX_SPEED, MIN_SPEED
from specon_agent.__main__ import build
from specon_agent.settings import AgentSettings

pytestmark = pytest.mark.plane


def _settings(plane: Plane, node: str, **more: object) -> AgentSettings:
    return AgentSettings(mode="cluster", manager_url="http://127.0.0.1:9", actuator="resize",
                         kubeconfig=plane.kubeconfig, metrics_port=0, node_name=node,
                         events=False, **more)


def test_the_agent_takes_its_nodes_allocatable_cpus(plane: Plane, tmp_path: Path) -> None:
    (node,) = plane.add_nodes(1, cpu="1500m", prefix=f"size-{secrets.token_hex(2)}")
    agent, _ = build(_settings(plane, node))
    assert agent.actuator.node_cpus == min(float(os.cpu_count() or 1), 1.5)
    # and its per-core speed, measured at start, goes into every heartbeat and the metrics
    assert agent.cpu_speed is not None and MIN_SPEED <= agent.cpu_speed <= MAX_SPEED
    assert agent.heartbeat(0.0).cpu_speed == agent.cpu_speed
    assert agent.metrics.node_cpu_speed._value.get() == agent.cpu_speed


def test_an_unreadable_node_falls_back_to_the_cpus_the_agent_sees(plane: Plane) -> None:
    agent, _ = build(_settings(plane, f"absent-{secrets.token_hex(3)}"))
    assert agent.actuator.node_cpus == float(os.cpu_count() or 1)


def test_a_stated_node_size_wins(plane: Plane) -> None:
    (node,) = plane.add_nodes(1, cpu="1", prefix=f"size-{secrets.token_hex(2)}")
    agent, _ = build(_settings(plane, node, node_cpus=4))
    assert agent.actuator.node_cpus == 4
