"""Real ``specon-agent`` processes (cluster mode, one per KWOK node, resize actuator) with the
real manager and kube-scheduler: the agents categorise jobs from their progress files, the
crowded node's agent asks to move its converged job, proves the requested checkpoint from
``saved.json``, and the manager moves the job to the node the SpeCon score chose, where it
resumes from that checkpoint.

KWOK runs no containers, so the test plays the kubelet's part (a container ID in pod status,
SIGTERM to the job's process when its pod is deleted, a start in the replacement) and the
training processes are the SDK's real Checkpointer and Reporter writing to a shared folder,
which the agents read through ``--progress-root`` as they would the shared volume. The wiring
is the chart's: each agent presents the token its own pod would hold (bound to a pod on its
node, for the manager's audience) over HTTPS verified with the CA, and kube-scheduler calls
the extender with mutual TLS."""

from __future__ import annotations

import io
import json
import math
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from planelib import Plane, free_port
from planemanager import REPO, Api, JobStandIn, ManagerProcess, give_container_ids, wait_for
from tlslib import issue, make_ca

from specon.quantity import parse_cpu
from specon.sdk import Reporter

pytestmark = pytest.mark.plane

SCHED = "specon-real"
TERMINAL = ("Succeeded", "Failed")


class AgentProcess:
    """``python -m specon_agent`` in cluster mode for one node, with the token its pod would
    hold (bound to the pod, for the manager's audience) and the manager's CA."""

    def __init__(self, plane: Plane, workdir: Path, node: str, token: str, manager: str,
                 shared: Path, ca: Path) -> None:
        (workdir / f"token-{node}").write_text(token)
        self.log = workdir / f"agent-{node}.log"
        self.argv = [sys.executable, "-m", "specon_agent", "--mode", "cluster",
                     "--node-name", node, "--kubeconfig", str(plane.kubeconfig),
                     "--actuator", "resize", "--node-cpus", "4", "--manager-url", manager,
                     "--token-file", str(workdir / f"token-{node}"),
                     "--manager-ca-file", str(ca),
                     "--progress-root", str(shared), "--pod-log-root", str(workdir / "logs"),
                     "--scheduler-name", SCHED, "--interval-s", "2", "--poll-s", "0.2",
                     "--heartbeat-s", "0.5", "--metrics-port", "0", "--min-step", "0",
                     # the research's policy: its agents ask to move a converged job
                     # (Algorithm 4); the shipped one's moves are planned by the manager
                     "--policy", "paper"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         cwd=REPO, start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(10)


def train_pod(name: str, tag: str, node: str, files: str, migratable: bool) -> dict[str, Any]:
    ann = {"specon.io/progress-file": f"{files}/progress.jsonl"}
    if migratable:
        ann["specon.io/checkpoint-dir"] = files
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "annotations": ann,
        "labels": {"specon.io/migratable": "true"} if migratable else {}},
        "spec": {"schedulerName": SCHED, "nodeSelector": {"specon-test": tag},
                 "nodeName": node, "terminationGracePeriodSeconds": 5,
                 "containers": [{"name": "main", "image": "train:local", "resources": {
                     "requests": {"cpu": "100m"}, "limits": {"cpu": "2"}}}]}}


def play_kubelet(plane: Plane, api: Api, ns: str) -> None:
    give_container_ids(plane, ns, api.pods(ns))


AUDIENCE = "specon-manager"


@dataclass
class Setup:
    nodes: list[str]
    tag: str
    manager: ManagerProcess
    tokens: dict[str, str]  # node -> the token its agent pod holds
    ca: Path


@pytest.fixture
def setup(plane: Plane, plane_namespace: str, tmp_path: Path) -> Iterator[Setup]:
    """Three KWOK nodes, an agent pod on each (ServiceAccount ``agent``) and its pod-bound
    token; the manager with TLS (the extender on its own port, mutual TLS with the real
    kube-scheduler) reviewing the agents' tokens with the API server."""
    ns = plane_namespace
    tag = f"ra{uuid.uuid4().hex[:6]}"
    nodes = plane.add_nodes(3, prefix=tag, labels={"specon-test": tag})
    plane.kubectl("create", "serviceaccount", "-n", ns, "agent")
    api = Api(plane)
    tokens = {}
    for i, node in enumerate(nodes):
        plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"agent-{i}"},
            "spec": {"nodeName": node, "serviceAccountName": "agent",
                     "containers": [{"name": "agent", "image": "agent:local"}]}}))
        pod = wait_for(f"agent-{i}", lambda i=i: api.pod(ns, f"agent-{i}"))
        tokens[node] = plane.request_token(ns, "agent", AUDIENCE, pod)
    api.close()
    certs = tmp_path / "tls"
    ca = make_ca(certs, "ca")
    serving = issue(certs, ca, "manager", "specon-manager", ("IP:127.0.0.1",))
    client = issue(certs, ca, "scheduler", "specon-scheduler", client=True)
    ext_port = free_port()
    plane.run_scheduler(SCHED, extenders=[{
        "urlPrefix": f"https://127.0.0.1:{ext_port}", "filterVerb": "filter",
        "prioritizeVerb": "prioritize", "weight": 10, "nodeCacheCapable": True,
        "ignorable": True, "httpTimeout": "5s", "enableHTTPS": True,
        "tlsConfig": {"certFile": str(client.cert), "keyFile": str(client.key),
                      "caFile": str(ca.cert)}}])
    manager = ManagerProcess(plane, tmp_path, None, ca_file=ca.cert, scheduler_name=SCHED,
                             alpha=0.01, interval_s=2, heartbeat_interval_s=5,
                             tls_cert_file=serving.cert, tls_key_file=serving.key,
                             extender_port=ext_port, extender_client_ca_file=ca.cert,
                             agent_audience=AUDIENCE, agent_service_accounts=[f"{ns}:agent"])
    try:
        yield Setup(nodes, tag, manager, tokens, ca.cert)
    finally:
        manager.kill()
        plane.stop_scheduler(SCHED)


def test_real_agents_move_a_converged_job_to_the_chosen_node_where_it_resumes(
    plane: Plane, plane_namespace: str, tmp_path: Path, setup: Setup,
) -> None:
    nodes, tag, manager = setup.nodes, setup.tag, setup.manager
    ns = plane_namespace
    api = Api(plane)
    shared = tmp_path / "shared"
    manager.start()
    # node 0: the job that converges (A) and two that progress; node 1: empty; node 2: one
    # progressing job. Scores after A is counted out: 2 + 2 on node 0, 0 on node 1, 2 on
    # node 2: node 1 is the unique choice.
    layout = {"train-a": 0, "train-b": 0, "train-c": 0, "train-d": 2}
    for name, i in layout.items():
        pod = train_pod(name, tag, nodes[i], f"jobs/{name}", migratable=name == "train-a")
        plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(pod))
    files = shared / ns  # a pod's annotations name paths in its namespace's folder
    job = JobStandIn(files / "jobs" / "train-a", "train-a")
    sink = io.StringIO()  # the records' stdout copy: only the files are read here
    others = {n: Reporter(files / "jobs" / n / "progress.jsonl", sink)
              for n in layout if n != "train-a"}
    for n in others:
        (files / "jobs" / n).mkdir(parents=True, exist_ok=True)
    agents = [AgentProcess(plane, tmp_path, n, setup.tokens[n], manager.url, shared, setup.ca)
              for n in nodes]
    t0 = time.monotonic()
    steps = {n: 0 for n in others}

    def tick() -> bool:
        """Kubelet, training steps and progress records, once."""
        for a in agents:
            assert a.proc.poll() is None, f"agent exited:\n{a.text()[-3000:]}"
        play_kubelet(plane, api, ns)
        pods = {p["metadata"]["name"]: p for p in api.pods(ns)}
        mine = [p for n, p in pods.items() if n.startswith("train-a")]
        if job.running:
            cur = next((p for p in mine if p["metadata"]["uid"] == job.uid), None)
            if cur is None or cur["metadata"].get("deletionTimestamp") or (
                    cur["status"].get("phase") in TERMINAL):
                job.sigterm()
        elif job.starts == 0 or job.exit_code is not None:
            for p in mine:
                cs = (p["status"].get("containerStatuses") or [{}])[0]
                if p["metadata"].get("deletionTimestamp") is None and cs.get("containerID") \
                        and p["metadata"]["uid"] != job.uid:
                    job.start(p)
                    break
        t = time.monotonic() - t0
        if job.running:
            job.run_steps(1)
            # Fast at first, then each interval improves less than the one before.
            job.ckpt.reporter.report(0.1 + 0.9 * math.exp(-t), step=job.step)
        for n, rep in others.items():
            steps[n] += 1
            rep.report(1.0 - 0.002 * steps[n], step=steps[n])
        live = [p["metadata"]["name"] for p in mine
                if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") not in TERMINAL]
        assert len(live) <= 1, f"two live pods of one job: {live}"
        return job.starts > 1 and job.running

    try:
        wait_for("the job to move and resume", tick, timeout=90, every=0.2)
        assert job.node == nodes[1] and job.pod != "train-a", (job.node, job.pod)
        assert api.pod(ns, "train-a") is None
        assert job.resumed is not None and job.stopped_at is not None
        assert (job.resumed.step, job.resumed.state) == job.stopped_at
        kinds = [(e["event"], e.get("reason")) for e in job.events()]
        assert kinds.index(("checkpoint", "request")) < kinds.index(("stop", "sigterm"))
        saved = job.saved()
        assert saved is not None
        rep = api.pod(ns, job.pod)
        assert rep is not None
        # the checkpoint that answered this migration's request, proven by the real agent
        assert rep["metadata"]["annotations"]["specon.io/migrated"] == saved["request"]
        source = agents[0].text()
        assert f"asked {ns}/train-a for checkpoint {saved['request']}" in source
        # the agent verified the checkpoint that answered the request (saved.json now names
        # the later SIGTERM save, which keeps the same request id)
        assert re.search(rf"{ns}/train-a: checkpoint ckpt-\d+ \(step \d+, request "
                         rf"{saved['request']}\) verified", source), source[-2000:]
        # the agent of the chosen node follows the replacement
        wait_for("node 1's agent to follow the replacement",
                 lambda: f"{ns}/{job.pod}" in agents[1].text() and "arrived" in agents[1].text(),
                 timeout=30)
        # the resize actuator rewrote CPU limits of KWOK pods through the API
        limits = {n: (api.pod(ns, n) or {"spec": {"containers": [{}]}})["spec"]["containers"][0]
                  .get("resources", {}).get("limits", {}).get("cpu")
                  for n in ("train-b", "train-c", "train-d", job.pod)}
        assert any(v not in (None, "2") for v in limits.values()), limits
        assert "resize cpu limit" in "".join(a.text() for a in agents)
        # every agent was known by its pod-bound token, over TLS, and nothing was refused
        metrics = httpx.get(f"{manager.url}/metrics", verify=manager.verify).text
        assert "specon_manager_agent_auth_refusals_total{" not in metrics, metrics
        assert 'specon_manager_heartbeats_total{result="forbidden"} 0.0' in metrics
        assert 'specon_manager_extender_requests_total{result="ok",verb="filter"}' in metrics
        codes = [a.stop() for a in agents]
        # Every limit is its owner's once the agents have left, the moved job's too: the
        # manager's copy of the pod got the owner's limit, not the one the source's agent had
        # set (found by the fault campaign).
        owner = {p["metadata"]["name"]: parse_cpu(p["spec"]["containers"][0]["resources"][
            "limits"]["cpu"]) for p in api.pods(ns) if p["metadata"]["name"].startswith("train")}
        assert owner == dict.fromkeys(("train-b", "train-c", "train-d", job.pod), 2.0), owner
    finally:
        codes = [a.stop() for a in agents]
        api.close()
    assert codes == [0, 0, 0]
