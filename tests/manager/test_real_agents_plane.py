"""Real ``specon-agent`` processes (cluster mode, one per KWOK node, resize actuator) with the
real manager and kube-scheduler: the agents categorise jobs from their progress files, the
crowded node's agent asks to move its converged job, proves the requested checkpoint from
``saved.json``, and the manager moves the job to the node the SpeCon score chose, where it
resumes from that checkpoint.

KWOK runs no containers, so the test plays the kubelet's part (a container ID in pod status,
SIGTERM to the job's process when its pod is deleted, a start in the replacement) and the
training processes are the SDK's real Checkpointer and Reporter writing to a shared folder,
which the agents read through ``--progress-root`` as they would the shared volume."""

from __future__ import annotations

import hashlib
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
from pathlib import Path
from typing import Any

import pytest
from planelib import Plane, free_port
from planemanager import REPO, Api, JobStandIn, ManagerProcess, wait_for

from specon.sdk import Reporter

pytestmark = pytest.mark.plane

SCHED = "specon-real"
TERMINAL = ("Succeeded", "Failed")


class AgentProcess:
    """``python -m specon_agent`` in cluster mode for one node."""

    def __init__(self, plane: Plane, workdir: Path, node: str, token: str, manager: str,
                 shared: Path) -> None:
        (workdir / f"token-{node}").write_text(token)
        self.log = workdir / f"agent-{node}.log"
        self.argv = [sys.executable, "-m", "specon_agent", "--mode", "cluster",
                     "--node-name", node, "--kubeconfig", str(plane.kubeconfig),
                     "--actuator", "resize", "--node-cpus", "4", "--manager-url", manager,
                     "--token-file", str(workdir / f"token-{node}"),
                     "--progress-root", str(shared), "--pod-log-root", str(workdir / "logs"),
                     "--scheduler-name", SCHED, "--interval-s", "2", "--poll-s", "0.2",
                     "--heartbeat-s", "0.5", "--metrics-port", "0", "--min-step", "0"]
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
    """A container ID in the status of every running pod that has none (what a kubelet
    reports; the agents find containers by it). One ID per pod, so that KWOK rewriting the
    status does not make a new container."""
    for p in api.pods(ns):
        st = p["status"]
        cs = (st.get("containerStatuses") or [{}])[0]
        if st.get("phase") != "Running" or p["metadata"].get("deletionTimestamp") or (
                cs.get("containerID")) or "running" not in (cs.get("state") or {}):
            continue
        body = {"status": {"containerStatuses": [{
            **cs, "containerID": "containerd://" + hashlib.sha256(
                p["metadata"]["uid"].encode()).hexdigest()}]}}
        plane.kubectl("patch", "pod", "-n", ns, p["metadata"]["name"], "--subresource=status",
                      "--type=merge", "-p", json.dumps(body))


@pytest.fixture
def setup(plane: Plane, tmp_path: Path) -> Iterator[tuple[list[str], str, ManagerProcess]]:
    tag = f"ra{uuid.uuid4().hex[:6]}"
    nodes = plane.add_nodes(3, prefix=tag, labels={"specon-test": tag})
    tokens = {f"tok-{uuid.uuid4().hex}": n for n in nodes}
    port = free_port()
    plane.run_scheduler(SCHED, extenders=[{
        "urlPrefix": f"http://127.0.0.1:{port}", "filterVerb": "filter",
        "prioritizeVerb": "prioritize", "weight": 10, "nodeCacheCapable": True,
        "ignorable": True, "httpTimeout": "5s"}])
    manager = ManagerProcess(plane, tmp_path, tokens, port=port, scheduler_name=SCHED,
                             alpha=0.01, interval_s=2, heartbeat_interval_s=5)
    try:
        yield nodes, tag, manager
    finally:
        manager.kill()
        plane.stop_scheduler(SCHED)


def test_real_agents_move_a_converged_job_to_the_chosen_node_where_it_resumes(
    plane: Plane, plane_namespace: str, tmp_path: Path,
    setup: tuple[list[str], str, ManagerProcess],
) -> None:
    nodes, tag, manager = setup
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
    job = JobStandIn(shared / "jobs" / "train-a", "train-a")
    sink = io.StringIO()  # the records' stdout copy: only the files are read here
    others = {n: Reporter(shared / "jobs" / n / "progress.jsonl", sink)
              for n in layout if n != "train-a"}
    for n in others:
        (shared / "jobs" / n).mkdir(parents=True, exist_ok=True)
    tokens = dict(line.split()[::-1] for line in manager.tokens_file.read_text().splitlines())
    agents = [AgentProcess(plane, tmp_path, n, tokens[n], manager.url, shared) for n in nodes]
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
    finally:
        codes = [a.stop() for a in agents]
        api.close()
    assert codes == [0, 0, 0]
