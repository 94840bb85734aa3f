"""Node speeds on the real control plane: an administrator labels nodes with
``specon.io/cpu-speed`` (kubectl), the manager reads the labels from its node watch cache, and
under the shipped (progress-aware) policy the real kube-scheduler, calling the extender, places
a new training pod on the node that the labels make the better host, where without labels it
would take the one with the fewest CPU-seconds of work ahead (docs/manager.md, "Node speeds")."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from managerlib import serve
from planelib import Plane, free_port
from planemanager import (
    AgentStandIn,
    Api,
    apply,
    placeholder_pods,
    running_on,
    scheduler_config,
    train_pod,
    wait_for,
)

from specon.names import LABEL_CPU_SPEED
from specon_manager.kube import Kube
from specon_manager.service import build
from specon_manager.settings import ManagerSettings

pytestmark = pytest.mark.plane

SCHED = "specon-speed"
#: CPU-seconds of work left that each node's agent reports (its own node's CPU-seconds): the
#: first node has the least ahead; the last two are kept out of the running.
WORK = [100.0, 150.0, 5000.0, 5000.0]


@pytest.fixture
def api(plane: Plane) -> Iterator[Api]:
    client = Api(plane)
    yield client
    client.close()


def test_a_labelled_faster_node_gets_the_new_training_pod(
        plane: Plane, api: Api, plane_namespace: str, tmp_path: Path) -> None:
    ns, tag = plane_namespace, f"s{uuid.uuid4().hex[:6]}"
    nodes = plane.add_nodes(4, prefix=tag, labels={"specon-test": tag})
    tokens = {f"tok-{uuid.uuid4().hex}": n for n in nodes}
    (tmp_path / "tokens").write_text("".join(f"{t} {n}\n" for t, n in tokens.items()))
    port = free_port()
    settings = ManagerSettings(kubernetes=True, migration=False, heartbeat_interval_s=120,
                               kubeconfig=plane.kubeconfig, tokens_file=tmp_path / "tokens",
                               scheduler_name=SCHED, policy="progress")
    app, service = build(settings, kube=Kube.from_kubeconfig(plane.kubeconfig))
    service.start()  # the node watch cache (no migrations: nothing else runs)
    plane.run_scheduler(SCHED, extenders=scheduler_config(port, True))
    try:
        with serve(app, port=port) as url:
            agents = {n: AgentStandIn(url, n, t) for t, n in tokens.items()}
            placeholder_pods(plane, ns, {f"{tag}-w{i}": n for i, n in enumerate(nodes)})
            for i, (n, work) in enumerate(zip(nodes, WORK, strict=True)):
                agents[n].jobs = {f"{tag}-w{i}": {"namespace": ns, "pod": f"{tag}-w{i}",
                                                   "category": "PC", "work_s": work}}
                agents[n].beat()
            state = service.state
            scores = state.priorities(nodes, 10)
            assert max(range(4), key=lambda i: scores[i]) == 0, scores  # all at speed 1
            # the first node's cores are a quarter as fast, the second's four times as fast
            plane.kubectl("label", "node", nodes[0], f"{LABEL_CPU_SPEED}=0.25")
            plane.kubectl("label", "node", nodes[1], f"{LABEL_CPU_SPEED}=4")
            plane.kubectl("label", "node", nodes[2], f"{LABEL_CPU_SPEED}=very-fast")
            wait_for("the labels in the manager's node cache", lambda: (
                state.node_speed(nodes[0]), state.node_speed(nodes[1])) == (0.25, 4.0))
            assert state.node_speed(nodes[2]) is None  # not a number: as if unlabelled
            scores = state.priorities(nodes, 10)
            assert max(range(4), key=lambda i: scores[i]) == 1, scores
            apply(plane, ns, train_pod("fresh", tag, SCHED))
            assert wait_for("the new pod running",
                            lambda: running_on(api, ns, "fresh")) == nodes[1]
    finally:
        plane.stop_scheduler(SCHED)
        service.stop()
