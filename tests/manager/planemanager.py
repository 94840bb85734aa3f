"""Helpers for the manager's plane tests: the real ``specon-manager`` process, a stand-in for
the node agent's heartbeat and checkpoint duties, and a stand-in for a training job's loop
that checkpoints with the real SDK.

The two stand-ins exist because KWOK nodes run no containers: ``AgentStandIn`` does what an
agent does over the real HTTP API (heartbeats, writing the request file, reporting
``saved.json``) and ``JobStandIn`` is the job's step loop with the real
:class:`specon.sdk.Checkpointer` on a real directory. Neither fakes the manager or the API."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from planelib import Plane, free_port

from specon.sdk import REQUEST_FILE, SAVED_FILE, Checkpointer, Reporter, Restored

REPO = Path(__file__).resolve().parents[2]


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 60, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


class Api:
    """Reads of the plane's API over HTTPS (a kubectl process per poll would cost more than
    the poll)."""

    def __init__(self, plane: Plane) -> None:
        ctx = ssl.create_default_context(cafile=str(plane.ca_file))
        self.http = httpx.Client(base_url=plane.server, verify=ctx, timeout=10, headers={
            "Authorization": f"Bearer {plane.admin_token}"})

    def get(self, path: str) -> dict[str, Any] | None:
        r = self.http.get(path)
        if r.status_code == 404:
            return None
        r.raise_for_status()
        out: dict[str, Any] = r.json()
        return out

    def pods(self, ns: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = (self.get(f"/api/v1/namespaces/{ns}/pods") or {})["items"]
        return items

    def pod(self, ns: str, name: str) -> dict[str, Any] | None:
        return self.get(f"/api/v1/namespaces/{ns}/pods/{name}")

    def job(self, ns: str, name: str) -> dict[str, Any] | None:
        return self.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")

    def event_items(self, ns: str) -> list[dict[str, Any]]:
        """The namespace's Events as the manager posts them (events.k8s.io/v1: ``reason``,
        ``note``, ``regarding``, ``reportingController``)."""
        items: list[dict[str, Any]] = (
            self.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events") or {})["items"]
        return items

    def events(self, ns: str) -> list[str]:
        # Every Event the manager posts has a reason; other controllers' (the Training
        # Operator's, seen once in CI) may have none, which events.k8s.io/v1 then omits.
        return [e.get("reason", "") for e in self.event_items(ns)]

    def changes(self, path: str, since: str, seconds: int = 2) -> list[dict[str, Any]]:
        """Every watch event of the collection at ``path`` after resourceVersion ``since``, in
        order (the API server replays them from its watch cache), read until the server ends
        the watch after ``seconds``. Unlike polls, no change between two reads is missed."""
        out: list[dict[str, Any]] = []
        params = {"watch": "1", "resourceVersion": since, "timeoutSeconds": str(seconds)}
        with self.http.stream("GET", path, params=params, timeout=seconds + 10) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if line.strip():
                    event = json.loads(line)
                    # an expired resourceVersion comes back as an ERROR event (410 Gone)
                    assert event["type"] != "ERROR", event
                    out.append(event)
        return out

    def close(self) -> None:
        self.http.close()


class ManagerProcess:
    """``python -m specon_manager`` against the plane, on a fixed loopback port."""

    def __init__(self, plane: Plane, workdir: Path, tokens: dict[str, str] | None,
                 ca_file: Path | None = None, **settings: Any) -> None:
        """``tokens`` None: no static tokens (the agents' tokens are reviewed with the API
        server); ``ca_file``: the manager serves HTTPS with a certificate this CA signed."""
        self.plane = plane
        self.workdir = workdir
        self.port = int(settings.pop("port", 0)) or free_port()
        self.url = f"{'https' if ca_file else 'http'}://127.0.0.1:{self.port}"
        self.verify: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=str(ca_file)) if ca_file else True)
        self.tokens_file = workdir / "tokens"
        static: dict[str, Any] = {}
        if tokens is not None:
            self.tokens_file.write_text("".join(f"{t} {n}\n" for t, n in tokens.items()))
            static = {"tokens_file": self.tokens_file}
        # The migration tests drive moves by the agents' requests (Algorithm 4), which the
        # research's policy answers; the shipped policy plans its moves itself and answers
        # every request "stay" (its planned moves: test_move_cost_manager.py, the real-node
        # e2e). A test may name another policy.
        self.settings = {"host": "127.0.0.1", "port": self.port, "kubeconfig": plane.kubeconfig,
                         "policy": "paper", **static, "reconcile_period_s": 0.2,
                         "heartbeat_interval_s": 60, "rebalance": False,
                         "checkpoint_timeout_s": 20, **settings}
        self.log = workdir / "manager.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, wait: str = "ready", **override: Any) -> None:
        """Start it and wait until ``/readyz`` (``wait="ready"``) or ``/healthz``
        (``wait="serving"``: a standby replica serves but is not ready) answers 200."""
        env = {**os.environ}
        for k, v in {**self.settings, **override}.items():
            env[f"SPECON_MANAGER_{k.upper()}"] = (
                str(v).lower() if isinstance(v, bool) else
                json.dumps(v) if isinstance(v, list) else str(v))
        self.starts += 1
        with self.log.open("ab") as out:
            out.write(f"\n=== start {self.starts} {override}\n".encode())
            self.proc = subprocess.Popen([sys.executable, "-m", "specon_manager"], env=env,
                                         stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                         start_new_session=True)

        path = "/readyz" if wait == "ready" else "/healthz"
        wait_for(f"the manager's {path}", lambda: self.answers(path), timeout=60)

    def answers(self, path: str = "/readyz") -> bool:
        """``path`` answers 200 (raises if the process has exited)."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"manager exited {self.proc.returncode}:\n{self.tail()}")
        try:
            return httpx.get(f"{self.url}{path}", timeout=2,
                             verify=self.verify).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_exit(self, timeout: float = 60) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def terminate(self) -> None:
        """SIGTERM, as the kubelet sends when the pod is deleted (``helm uninstall``, a rolling
        update); :meth:`wait_exit` waits for the shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


class JobStandIn:
    """Stand-in for a training job's process: its step loop with the real
    :class:`specon.sdk.Checkpointer` on a real directory (the job's PersistentVolume).

    It lives in one pod at a time. When that pod is deleted, :meth:`sigterm` does what the
    kubelet's SIGTERM makes a real job do (save at the step boundary, exit 143); :meth:`start`
    in the replacement pod resumes from the newest good checkpoint, as a restarted job does."""

    def __init__(self, directory: Path, prefix: str) -> None:
        self.directory = directory
        self.prefix = prefix  # the names of the job's pods start with it
        self.pod = self.uid = self.node = ""
        self.step = 0
        self.state: dict[str, Any] = {"weights": [0.0, 0.0], "step": 0}
        self.log = io.StringIO()
        self.exit_code: int | None = None
        self.stopped_at: tuple[int, dict[str, Any]] | None = None  # (step, state) at exit
        self.resumed: Restored | None = None
        self.starts = 0

    def start(self, pod: dict[str, Any]) -> None:
        """Start in this (running) pod, or restart in a replacement: resume from the newest
        good checkpoint if any."""
        self.pod, self.uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        self.node = pod["spec"]["nodeName"]
        self.exit_code = None
        self.starts += 1
        self.ckpt = Checkpointer(self.directory, handle_sigterm=False,
                                 reporter=Reporter(self.directory / "progress.jsonl", self.log))
        restored = self.ckpt.resume()
        if self.starts > 1:
            self.resumed = restored
        if restored is not None:
            self.step, self.state = restored.step, restored.state

    def events(self) -> list[dict[str, Any]]:
        """The SDK's records in the progress file (checkpoint, stop, resume, ...)."""
        path = self.directory / "progress.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines]

    @property
    def running(self) -> bool:
        return self.starts > 0 and self.exit_code is None

    def run_steps(self, n: int) -> None:
        for _ in range(n):
            if not self.running:
                return
            self.step += 1
            self.state = {"weights": [w + 0.5 for w in self.state["weights"]], "step": self.step}
            try:
                self.ckpt.step_end(self.step, self.state)
            except SystemExit as exc:
                self.exit_code = int(exc.code or 0)
                self.stopped_at = (self.step, self.state)

    def sigterm(self) -> None:
        """The pod is being deleted: finish the step, save, exit 143."""
        if self.running:
            self.ckpt.request_stop("sigterm")
            self.run_steps(1)

    def saved(self) -> dict[str, Any] | None:
        try:
            out: dict[str, Any] = json.loads((self.directory / SAVED_FILE).read_text())
            return out
        except (OSError, ValueError):
            return None


def verified(directory: Path, saved: dict[str, Any]) -> bool:
    """What the requester does before acting on ``saved.json`` (docs/training-contract.md §4):
    the named checkpoint's manifest and data file agree with it, byte for byte."""
    try:
        manifest = json.loads((directory / f"{saved['checkpoint']}.json").read_text())
        data = (directory / manifest["file"]).read_bytes()
    except (OSError, ValueError, KeyError):
        return False
    return bool(manifest["sha256"] == saved["sha256"] == hashlib.sha256(data).hexdigest())


class AgentStandIn:
    """What a node agent sends and does for the manager, over the manager's real HTTP API."""

    def __init__(self, url: str, node: str, token: str) -> None:
        self.url = url
        self.node = node
        self.headers = {"Authorization": f"Bearer {token}"}
        self.seq = 0
        self.jobs: dict[str, dict[str, Any]] = {}  # pod -> JobReport fields
        self.checkpoint_dirs: dict[str, JobStandIn] = {}

    def set_jobs(self, jobs: dict[str, str], namespace: str) -> None:
        """Report these jobs (pod -> category); jobs hosted with :meth:`host` stay."""
        kept = {pod: rep for pod, rep in self.jobs.items() if pod in self.checkpoint_dirs}
        self.jobs = {pod: {"namespace": namespace, "pod": pod, "category": cat}
                     for pod, cat in jobs.items()}
        for pod, rep in kept.items():
            self.jobs.setdefault(pod, rep)

    def host(self, job: JobStandIn, namespace: str, category: str) -> None:
        """Follow a job running in a pod of this node (its category, its saved.json)."""
        self.jobs[job.pod] = {"namespace": namespace, "pod": job.pod, "uid": job.uid,
                              "category": category, "checkpointable": True}
        self.checkpoint_dirs[job.pod] = job

    def drop(self, pod: str) -> None:
        """The pod's container ended: the agent stops reporting it."""
        self.jobs.pop(pod, None)
        self.checkpoint_dirs.pop(pod, None)

    def beat(self) -> dict[str, Any] | None:
        """One heartbeat; writes the request file for every checkpoint request (as an agent
        does). Returns the reply, or None while the manager is away."""
        self.seq += 1
        jobs = []
        for pod, rep in self.jobs.items():
            rep = dict(rep)
            job = self.checkpoint_dirs.get(pod)
            saved = job.saved() if job else None
            if saved is not None and job is not None and verified(job.directory, saved):
                rep["checkpoint"] = {"request": saved.get("request"), "name": saved["checkpoint"],
                                     "step": saved["step"], "sha256": saved["sha256"],
                                     "time": saved["time"]}
            jobs.append(rep)
        body = {"node": self.node, "time": time.time(), "seq": self.seq, "capacity_cpus": 4,
                "load_cores": 0.5 * len(jobs), "jobs": jobs}
        try:
            r = httpx.post(f"{self.url}/v1/heartbeat", json=body, headers=self.headers,
                           timeout=5)
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            raise AssertionError(f"heartbeat refused: {r.status_code} {r.text}")
        reply: dict[str, Any] = r.json()
        for req in reply["checkpoint_requests"]:
            job = self.checkpoint_dirs.get(req["pod"])
            if job is not None and job.running and req.get("uid") in ("", job.uid):
                tmp = job.directory / ".tmp-request"
                tmp.write_text(json.dumps({"id": req["id"], "exit": req["exit"]}))
                tmp.rename(job.directory / REQUEST_FILE)
        return reply

    def reallocate(self, namespace: str, pod: str) -> dict[str, Any]:
        r = httpx.post(f"{self.url}/v1/reallocate", headers=self.headers, timeout=10, json={
            "node": self.node, "namespace": namespace, "pod": pod, "time": time.time()})
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out


def give_container_ids(plane: Plane, ns: str, pods: list[dict[str, Any]]) -> None:
    """What a kubelet reports and KWOK does not: a container ID in the status of every running
    pod that has none (node agents find containers by it). One ID per pod (from its UID), so
    that KWOK rewriting the status does not make a new container."""
    for p in pods:
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


def scheduler_config(port: int, node_cache: bool) -> list[dict[str, Any]]:
    """The extender as the chart registers it, but with 30 s for a call where the chart gives
    5 s: these tests assert where the extender placed a pod, and on this 2-core machine, with
    the campaign and the middle pass beside them, a call to a manager started a moment before
    might take longer than 5 s; the ignorable extender would then be skipped and the default
    plugins place the pod. A manager that is away is refused at once, not waited for."""
    return [{"urlPrefix": f"http://127.0.0.1:{port}", "filterVerb": "filter",
             "prioritizeVerb": "prioritize", "weight": 10, "nodeCacheCapable": node_cache,
             "ignorable": True, "httpTimeout": "30s"}]


def extender_calls(manager_url: str) -> list[str]:
    """The manager's extender call counters (``verb``, ``result``), as its /metrics says."""
    try:
        r = httpx.get(f"{manager_url}/metrics", timeout=5)
    except httpx.HTTPError as exc:
        return [f"(the manager's /metrics did not answer: {exc})"]
    calls = [ln for ln in r.text.splitlines()
             if ln.startswith("specon_manager_extender_requests_total{")]
    return calls or [f"(no extender call counted; /metrics answered {r.status_code})"]


def assert_placed(plane: Plane, pod: dict[str, Any], node: str, scheduler: str,
                  manager_url: str | None = None) -> None:
    """``pod`` was bound to ``node``; if not, the scheduler's log lines about the extender and
    this pod say why (a failed filter or prioritize call is logged there:
    planelib.EXTENDER_LOG_ARGS), and, given ``manager_url``, the manager's extender counters say
    which calls it answered."""
    got = pod["spec"].get("nodeName")
    if got == node:
        return
    name = pod["metadata"]["name"]
    comp = plane.components.get(f"kube-scheduler-{scheduler}")
    lines = comp.tail(2000).splitlines() if comp is not None else ["(no scheduler log)"]
    why = [ln for ln in lines if "xtender" in ln or name in ln][-20:]
    calls = extender_calls(manager_url) if manager_url else []
    raise AssertionError(f"pod {name} bound to {got}, not {node}; the scheduler's log:\n"
                         + "\n".join(why) + "".join(f"\nthe manager: {c}" for c in calls))


def train_pod(name: str, tag: str, scheduler: str, node: str | None = None) -> dict[str, Any]:
    """A migratable training pod for the plane's KWOK nodes labelled ``specon-test: tag``."""
    spec: dict[str, Any] = {
        "schedulerName": scheduler, "nodeSelector": {"specon-test": tag},
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "main", "image": "train:local",
                        "resources": {"requests": {"cpu": "100m"}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {
        "specon.io/training": "true", "specon.io/migratable": "true"}}, "spec": spec}


def placeholder_pods(plane: Plane, ns: str, where: dict[str, str]) -> None:
    """Real pods ``name -> node`` (pinned, no requests) for the jobs a stand-in agent reports
    only to weigh in the scores: the manager checks that reported jobs are pods on the
    reporting node (``verify_reported_pods``). Pods that exist already are left as they are."""
    api = Api(plane)
    try:
        have = {p["metadata"]["name"] for p in api.pods(ns)}
    finally:
        api.close()
    items = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
              "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                       "containers": [{"name": "main", "image": "placeholder:local"}]}}
             for name, node in where.items() if name not in have]
    if items:
        plane.kubectl("create", "-n", ns, "-f", "-",
                      input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def apply(plane: Plane, ns: str, obj: dict[str, Any]) -> None:
    plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(obj))


def running_on(api: Api, ns: str, name: str) -> str | None:
    p = api.pod(ns, name)
    if p is None or p["status"].get("phase") != "Running" or p["metadata"].get(
            "deletionTimestamp"):
        return None
    node: str = p["spec"]["nodeName"]
    return node
