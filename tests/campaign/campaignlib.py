"""The fault-injection campaign of issue 15: a real plane, real managers, real agents, a stream of
training jobs, and random faults drawn from a seed; after each fault the time to recover, and
throughout the run the invariants.

The world:
- the test plane (etcd, kube-apiserver, kube-controller-manager, KWOK, kube-scheduler);
- four KWOK nodes, each with a real ``specon-agent`` process (cluster mode, resize actuator,
  an originals file on its "node");
- two ``specon-manager`` replicas with leader election, behind a relay that forwards to the
  replica answering ``/readyz`` (what the chart's Service does with readiness); the agents and
  kube-scheduler's extender calls go through it;
- a stream of migratable training pods placed by the real kube-scheduler with the extender;
  each job's step loop is :class:`planemanager.JobStandIn` (the real SDK Checkpointer on a real
  directory) and the harness plays the kubelet's part for KWOK (container IDs, SIGTERM when a
  pod is deleted, completion when the job's steps are done).

The faults (``KINDS``), each the real thing unless said otherwise:
- ``manager-kill``: SIGKILL of the leader at a random moment, restarted 1-3 s later;
- ``lease-split``: the leader frozen (SIGSTOP) past its Lease, the other replica takes over,
  then the old leader thaws (SIGCONT) believing for a moment that it still leads;
- ``apiserver-outage``: kube-apiserver stopped for ``outage_s`` seconds, then started again;
- ``etcd-restart``: etcd stopped and started on the same data;
- ``agent-kill``: SIGKILL of a node's agent, restarted 0.5-3 s later with the same originals file;
- ``node-notready``: a node's agent frozen and the node's Ready condition set False;
- ``corrupt-checkpoint``: the checkpoint a job writes for a migration's request is truncated
  before its agent can verify it (or, when no request comes, the newest checkpoint of a job):
  the one fault the real parts cannot produce on demand, injected by the harness;
- ``heartbeat-storm``: for a few seconds, heartbeats with bad tokens, spoofed node names,
  oversized bodies and replayed sequence numbers from several threads;
- the kinds of issue 32 (user deletes mid-migration, the manager removed for good, a full or
  read-only volume, a slow API server, an agent's clock stepped), with what must hold after
  each: ``second_round``. For them the jobs' volume is a tmpfs of its own, and the managers and
  agents reach the API server through a proxy that is not slow until that fault.

The invariants, checked every tick and at the end (``Violation``):
- no job lost: every job submitted completes all its steps (or was deleted by its user, and
  then never comes back);
- no job running twice: never two live (bound, not deleting, not ended) pods of one job;
- every migrated job resumed from a checkpoint at a step no earlier than the one its agent
  verified for the migration (and never from a checkpoint the harness corrupted), at the step
  where it stopped (at its last good save when its SIGTERM save failed on a bad volume);
- every CPU limit the agents changed is back to its owner's value once the agents leave.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "manager"))  # planemanager

import second_round
from planelib import Plane, free_port
from planemanager import REPO, Api, JobStandIn, ManagerProcess, give_container_ids

from specon.quantity import parse_cpu

FIRST_ROUND = ("manager-kill", "lease-split", "apiserver-outage", "etcd-restart", "agent-kill",
               "node-notready", "corrupt-checkpoint", "heartbeat-storm", "engine-restart")
KINDS = (*FIRST_ROUND, *second_round.KINDS)
PLANE_KINDS = tuple(k for k in KINDS if k != "engine-restart")
STEPPED_CLOCK = Path(__file__).resolve().parent / "steppedclock.py"
SCHED = "specon-campaign"
TERMINAL = ("Succeeded", "Failed")
OWNER_LIMIT = "2"  # every training pod's CPU limit as its owner set it
LEASE = {"leader_election": True, "lease_duration_s": 3.0, "renew_period_s": 0.5}
PERIODIC = 25  # the jobs also save every 25 steps


class Violation(AssertionError):
    """An invariant broke."""


# -- the Service: forward to the ready replica -----------------------------------------------
class Relay:
    """A TCP relay on a loopback port to whichever replica answers ``/readyz`` (checked every
    0.2 s): the role of the chart's Service, whose endpoints are the ready pods. Connections
    already open stay with their replica, as with kube-proxy."""

    def __init__(self, replicas: list[ManagerProcess]) -> None:
        self.replicas = replicas
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.target: ManagerProcess | None = None
        self._stop = threading.Event()
        self._srv = socket.create_server(("127.0.0.1", self.port))
        self._srv.settimeout(0.2)
        threading.Thread(target=self._probe, daemon=True).start()
        threading.Thread(target=self._accept, daemon=True).start()

    def ready(self) -> list[ManagerProcess]:
        return [r for r in self.replicas if _answers(r, "/readyz")]

    def _probe(self) -> None:
        while not self._stop.is_set():
            ready = self.ready()
            self.target = ready[0] if len(ready) == 1 else (
                self.target if self.target in ready else (ready[0] if ready else None))
            time.sleep(0.2)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            target = self.target
            if target is None:
                conn.close()
                continue
            try:
                up = socket.create_connection(("127.0.0.1", target.port), timeout=2)
            except OSError:
                conn.close()
                continue
            up.settimeout(None)
            conn.settimeout(None)
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self._srv.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def _answers(m: ManagerProcess, path: str) -> bool:
    if m.proc is None or m.proc.poll() is not None or getattr(m, "frozen", False):
        return False
    try:
        return httpx.get(f"{m.url}{path}", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _metric(text: str, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        lab = head[len(name):]
        if lab.startswith("{"):
            got = ",".join(sorted(lab[1:-1].split(","))) if lab != "{}" else ""
        elif lab == "":
            got = ""
        else:
            continue
        if got == want:
            return float(value)
    return None


# -- agents ----------------------------------------------------------------------------------
class Agent:
    """``python -m specon_agent`` for one KWOK node (cluster mode, resize actuator, originals
    file kept across restarts, as on the node's disk)."""

    def __init__(self, workdir: Path, node: str, token: str, manager_url: str,
                 shared: Path, kubeconfig: Path) -> None:
        self.node = node
        (workdir / f"token-{node}").write_text(token)
        self.log = workdir / f"agent-{node}.log"
        self.metrics_port = free_port()
        #: The seconds its wall clock is off (the clock-step fault writes it; steppedclock.py)
        self.clock_file = workdir / f"clock-{node}"
        self.clock_file.write_text("0")
        self.argv = [sys.executable, str(STEPPED_CLOCK), str(self.clock_file), "-m",
                     "specon_agent", "--mode", "cluster",
                     "--node-name", node, "--kubeconfig", str(kubeconfig),
                     "--actuator", "resize", "--node-cpus", "4", "--manager-url", manager_url,
                     "--token-file", str(workdir / f"token-{node}"),
                     "--originals-file", str(workdir / f"state-{node}" / "originals.json"),
                     "--progress-root", str(shared), "--pod-log-root", str(workdir / "logs"),
                     "--scheduler-name", SCHED, "--interval-s", "2", "--poll-s", "0.2",
                     "--heartbeat-s", "0.5", "--http-timeout-s", "2", "--backoff-max-s", "2",
                     "--metrics-port", str(self.metrics_port),
                     "--metrics-address", "127.0.0.1", "--min-step", "0",
                     # the managers' policy (planemanager.ManagerProcess): moves on request
                     "--policy", "paper"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.frozen = False
        self.start()

    def start(self) -> None:
        with self.log.open("ab") as out:
            out.write(f"\n=== start {time.time():.3f}\n".encode())
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         cwd=REPO, start_new_session=True)
        self.frozen = False

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.frozen = sig == signal.SIGSTOP

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if self.frozen:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            if self.frozen:
                self.signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def heartbeats_ok(self) -> float:
        """Heartbeats the manager accepted since this process started (0 while unreachable)."""
        try:
            text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=1).text
        except httpx.HTTPError:
            return 0.0
        return _metric(text, "specon_agent_manager_requests_total", kind="heartbeat",
                       outcome="ok") or 0.0

    def text(self) -> str:
        return self.log.read_text(errors="replace")


# -- jobs ------------------------------------------------------------------------------------
@dataclass
class Job:
    name: str
    steps: int
    standin: JobStandIn
    tau: float = 12.0  # steps over which its loss falls by e (fast: converges early)
    done: bool = False
    #: request id -> the step of the first checkpoint saved for it (what the agent verified)
    request_steps: dict[str, int] = field(default_factory=dict)
    corrupted: set[str] = field(default_factory=set)  # checkpoint names the harness truncated
    moves: int = 0
    deleted: float | None = None  # when its user deleted it (user-delete)
    #: the step of its newest good checkpoint when it last stopped (its SIGTERM save's, unless
    #: that failed: a full or read-only volume)
    stop_saved: int | None = None
    exited_at: float | None = None
    completed_at: float | None = None


def _pod(name: str, tag: str, files: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "labels": {"specon.io/training": "true", "specon.io/migratable": "true",
                                 "campaign-job": name},
        "annotations": {"specon.io/progress-file": f"{files}/progress.jsonl",
                        "specon.io/checkpoint-dir": files}},
        "spec": {"schedulerName": SCHED, "nodeSelector": {"specon-test": tag},
                 "terminationGracePeriodSeconds": 5,
                 "containers": [{"name": "main", "image": "train:local", "resources": {
                     "requests": {"cpu": "100m"}, "limits": {"cpu": OWNER_LIMIT}}}]}}


def _live(p: dict[str, Any]) -> bool:
    return bool(p["spec"].get("nodeName")) and not p["metadata"].get("deletionTimestamp") and (
        p["status"].get("phase") not in TERMINAL)


@dataclass
class FaultRecord:
    kind: str
    started: float
    detail: str = ""
    lifted: float | None = None
    recovered: float | None = None

    @property
    def recover_s(self) -> float | None:
        return None if self.recovered is None or self.lifted is None else (
            self.recovered - self.lifted)


# -- the engine lane -------------------------------------------------------------------------
ENGINE_JOB = ('i=0; while :; do i=$((i+1)); '
              'echo "step=$i loss=$(awk "BEGIN{print 0.1+27/(30+$i)}")"; sleep 0.2; done')


class EngineLane:
    """The agent on the real engine: a private Docker Engine (its own roots and socket, no
    network, ``--live-restore`` as on a production node, so containers outlive a restart),
    three jobs in a busybox image printing a falling loss (owner's limit: half a core), and a
    standalone agent (docker actuator, originals file) that throttles them. Its fault,
    ``engine-restart``, stops the engine (SIGTERM) and starts it again: the agent must live
    through it, find every job again and, when it leaves, put back every owner's limit."""

    OWNER_QUOTA = 50_000
    JOBS = 3

    def __init__(self, workdir: Path, rng: random.Random, log: Callable[[str], None]) -> None:
        import shutil
        import tempfile

        self.rng, self.log, self.workdir = rng, log, workdir
        busybox = shutil.which("busybox")
        if shutil.which("dockerd") is None or busybox is None:
            raise RuntimeError("the engine lane needs dockerd and a static busybox")
        self.busybox = busybox
        # Short: the engine's sockets live below it (a unix socket path has 108 bytes).
        self.root = Path(tempfile.mkdtemp(prefix="specon-engine-"))
        self.sock = self.root / "sock"
        self.url = f"unix://{self.sock}"
        self.tag = f"specon-campaign-{uuid.uuid4().hex[:8]}"  # the agent's label (name)
        self.dockerd: subprocess.Popen[bytes] | None = None
        self.agent: subprocess.Popen[bytes] | None = None
        self.metrics_port = free_port()
        self.names: list[str] = []

    def _docker(self, *args: str, input: bytes | None = None) -> str:
        res = subprocess.run(["docker", "-H", self.url, *args], input=input,
                             capture_output=True, timeout=120)
        if res.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args[:2])}: {res.stderr.decode()[-300:]}")
        return res.stdout.decode()

    def _start_engine(self) -> None:
        with (self.workdir / "dockerd.log").open("ab") as out:
            self.dockerd = subprocess.Popen(
                ["dockerd", "--data-root", str(self.root / "data"), "--exec-root",
                 str(self.root / "x"), "--pidfile", str(self.root / "pid"), "--host", self.url,
                 "--bridge=none", "--iptables=false", "--ip6tables=false", "--live-restore"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._docker("info", "--format", "{{.ID}}")
                return
            time.sleep(0.3)
        raise RuntimeError(f"private dockerd did not answer; see {self.workdir / 'dockerd.log'}")

    def start(self) -> None:
        import io
        import tarfile

        self.workdir.mkdir(parents=True, exist_ok=True)
        self._start_engine()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(self.busybox, "bin/busybox")
            for tool in ("sh", "awk", "sleep"):
                link = tarfile.TarInfo(f"bin/{tool}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)
        self._docker("import", "-", "campaign-busybox:1", input=buf.getvalue())
        for i in range(self.JOBS):
            name = f"ej{i}-{self.tag[-8:]}"
            self._docker("run", "-d", "--name", name, "--network", "none",
                         "--label", f"{self.tag}=true",
                         "--cpu-period", "100000", "--cpu-quota", str(self.OWNER_QUOTA),
                         "campaign-busybox:1", "sh", "-c", ENGINE_JOB)
            self.names.append(name)
        self.agent_log = self.workdir / "agent.log"
        self._start_agent()

    def _start_agent(self) -> None:
        with self.agent_log.open("ab") as out:
            self.agent = subprocess.Popen(
                [sys.executable, "-m", "specon_agent", "--docker-host", self.url,
                 "--label", self.tag, "--poll-s", "0.5", "--interval-s", "2",
                 "--originals-file", str(self.workdir / "originals.json"),
                 "--metrics-port", str(self.metrics_port), "--metrics-address", "127.0.0.1"],
                stdout=out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)

    def quotas(self) -> dict[str, int]:
        out = self._docker("inspect", "--format", "{{.Name}} {{.HostConfig.CpuQuota}}",
                           *self.names)
        return {n.lstrip("/"): int(q) for n, q in (ln.split() for ln in out.splitlines())}

    def running(self) -> list[str]:
        out = self._docker("ps", "--filter", f"label={self.tag}=true", "--format", "{{.Names}}")
        return out.split()

    def healthy(self) -> bool:
        """The engine answering with every job running, and the agent alive and following
        each (a limit sample for each)."""
        if self.agent is None or self.agent.poll() is not None:
            return False
        try:
            if sorted(self.running()) != sorted(self.names):
                return False
        except (RuntimeError, subprocess.TimeoutExpired):
            return False
        try:
            text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=1).text
        except httpx.HTTPError:
            return False
        return all(_metric(text, "specon_agent_job_cpu_limit_cores", namespace="docker",
                           pod=n, container="main") is not None for n in self.names)

    def restart(self, rec: FaultRecord) -> None:
        assert self.dockerd is not None
        self.dockerd.send_signal(signal.SIGTERM)
        try:
            self.dockerd.wait(60)
        except subprocess.TimeoutExpired:
            self.dockerd.kill()
            self.dockerd.wait(10)
        down = self.rng.uniform(0.5, 3)
        rec.detail = f"private dockerd stopped, started again after {down:.1f} s"
        time.sleep(down)
        self._start_engine()
        rec.lifted = time.monotonic()

    def finish(self, violations: list[str]) -> None:
        alive = self.running()
        lost = sorted(set(self.names) - set(alive))
        if lost:
            violations.append(f"engine lane: jobs gone after the engine restarts: {lost}")
        assert self.agent is not None
        self.agent.send_signal(signal.SIGTERM)
        try:
            code = self.agent.wait(30)
        except subprocess.TimeoutExpired:
            self.agent.kill()
            code = -9
        if code != 0:
            violations.append(f"engine lane: the agent exited {code} on SIGTERM")
        wrong = {n: q for n, q in self.quotas().items() if q != self.OWNER_QUOTA}
        if wrong:
            violations.append(f"engine lane: CPU quotas not the owner's {self.OWNER_QUOTA} after "
                              f"the agent left: {wrong}")

    def changed_limits(self) -> int:
        """How many limit changes the agent logged (the lane did throttle)."""
        text = self.agent_log.read_text(errors="replace") if self.agent_log.exists() else ""
        return text.count("cpu limit")

    def close(self) -> None:
        import shutil

        if self.agent is not None and self.agent.poll() is None:
            self.agent.kill()
        with contextlib.suppress(Exception):
            if self.names:
                self._docker("rm", "-f", *self.names)
        if self.dockerd is not None and self.dockerd.poll() is None:
            self.dockerd.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.dockerd.wait(60)
        # the engine's own containerd, should it outlive it, and the mounts it leaves (its
        # data root is bind-mounted onto itself)
        subprocess.run(["pkill", "-f", str(self.root)], check=False)
        with open("/proc/self/mounts") as f:
            points = [ln.split()[1] for ln in f if ln.split()[1].startswith(str(self.root))]
        for point in sorted(points, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


# -- the world -------------------------------------------------------------------------------
class World:
    """Everything of one campaign run; see the module docstring."""

    def __init__(self, plane: Plane, namespace: str, workdir: Path, seed: int,
                 nodes: int = 4, active_jobs: int = 12, job_steps: tuple[int, int] = (150, 300),
                 log: Callable[[str], None] = print, engine: bool = False) -> None:
        self.plane, self.ns, self.workdir = plane, namespace, workdir
        self.rng = random.Random(seed)
        self.log = log
        self.active_jobs, self.job_steps = active_jobs, job_steps
        self.shared = workdir / "shared"
        self.slow: Any = None  # second_round.prepare: the slow proxy and its kubeconfig
        self.slow_kubeconfig = plane.kubeconfig
        second_round.prepare(self)
        self.tag = f"fc{uuid.uuid4().hex[:6]}"
        self.nodes = plane.add_nodes(nodes, prefix=self.tag, labels={"specon-test": self.tag})
        self.tokens = {n: uuid.uuid4().hex for n in self.nodes}
        self.managers = []
        for name in ("a", "b"):
            (workdir / name).mkdir(exist_ok=True)
            self.managers.append(ManagerProcess(
                plane, workdir / name, {t: n for n, t in self.tokens.items()},
                identity=f"replica-{name}", lease_namespace=namespace, **LEASE,
                kubeconfig=self.slow_kubeconfig,
                scheduler_name=SCHED, alpha=0.01, interval_s=2, heartbeat_interval_s=1,
                checkpoint_timeout_s=15))
        self.jobs: dict[str, Job] = {}
        self.violations: list[str] = []
        self.faults: list[FaultRecord] = []
        self.tick_errors = 0
        self.submitted = 0
        self.submitting = True
        #: an armed corrupt-checkpoint fault and the save it waits for ("request", "sigterm")
        self._arm_corrupt: tuple[FaultRecord, str] | None = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self.api = Api(plane)
        self.t0 = time.monotonic()
        self.engine = EngineLane(workdir / "engine", self.rng, log) if engine else None
        self.kinds = KINDS if engine else PLANE_KINDS

    # -- life cycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self.managers[0].start()
        self.managers[1].start(wait="serving")
        self.relay = Relay(self.managers)
        self.plane.run_scheduler(SCHED, extenders=[{
            "urlPrefix": self.relay.url, "filterVerb": "filter", "prioritizeVerb": "prioritize",
            "weight": 10, "nodeCacheCapable": True, "ignorable": True, "httpTimeout": "2s"}])
        self.agents = {n: Agent(self.workdir, n, self.tokens[n], self.relay.url, self.shared,
                                self.slow_kubeconfig) for n in self.nodes}
        self._ticker = threading.Thread(target=self._tick_loop, daemon=True)
        self._ticker.start()
        if self.engine is not None:
            self.engine.start()
        if self.wait_healthy(time.monotonic(), timeout=90) is None:
            raise RuntimeError(f"the world did not come up: {self.diagnose()}")

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            self._ticker.join(10)
        for a in getattr(self, "agents", {}).values():
            a.kill()
        for m in self.managers:
            if getattr(m, "frozen", False) and m.proc is not None:
                m.proc.send_signal(signal.SIGCONT)
            m.kill()
        with contextlib.suppress(Exception):
            self.relay.close()
        with contextlib.suppress(Exception):
            self.plane.stop_scheduler(SCHED)
        if self.engine is not None:
            self.engine.close()
        second_round.close(self)
        self.api.close()

    # -- the kubelet's and the jobs' part, every 0.2 s -----------------------------------------
    def _tick_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Violation as exc:
                self.violations.append(str(exc))
                self.log(f"VIOLATION: {exc}")
            except Exception as exc:  # the API server away, a kubectl refused: try again
                self.tick_errors += 1
                if self.tick_errors % 50 == 1:
                    self.log(f"tick: {type(exc).__name__}: {str(exc)[:200]}")
            time.sleep(0.2)

    def tick(self) -> None:
        with self._lock:
            pods = self.api.pods(self.ns)
            give_container_ids(self.plane, self.ns, pods)
            by_job: dict[str, list[dict[str, Any]]] = {}
            for p in pods:
                j = (p["metadata"].get("labels") or {}).get("campaign-job")
                if j:
                    by_job.setdefault(j, []).append(p)
            for job in list(self.jobs.values()):
                try:
                    self._drive(job, by_job.get(job.name, []))
                except OSError as exc:  # from the SDK: a real job would have crashed (exit 1)
                    raise Violation(f"{job.name}: the SDK raised {exc!r}") from exc
            live = sum(1 for j in self.jobs.values() if not j.done and j.deleted is None)
            if self.submitting and live < self.active_jobs:
                self._submit()

    def _submit(self) -> None:
        self.submitted += 1
        name = f"j{self.submitted:04d}"
        steps = self.rng.randint(*self.job_steps)
        d = self.shared / self.ns / "jobs" / name  # the pod's annotations name jobs/<name>
        d.mkdir(parents=True, exist_ok=True)
        self.plane.kubectl("apply", "-n", self.ns, "-f", "-",
                           input=json.dumps(_pod(name, self.tag, f"jobs/{name}")))
        # half converge early (and may be moved), half keep progressing all along
        tau = self.rng.choice((12.0, 400.0))
        self.jobs[name] = Job(name, steps, JobStandIn(d, name), tau)

    def _drive(self, job: Job, pods: list[dict[str, Any]]) -> None:
        s = job.standin
        live = [p["metadata"]["name"] for p in pods if _live(p)]
        if len(live) > 1:
            raise Violation(f"{job.name}: two live pods at once: {live}")
        if job.deleted is not None and time.monotonic() - job.deleted > 2:
            back = [p["metadata"]["name"] for p in pods
                    if not p["metadata"].get("deletionTimestamp")]
            if back:  # 2 s: the API server's list may lag its own delete a moment
                raise Violation(f"{job.name}: deleted by its user, and back: {back}")
        if job.done:
            return
        if s.running:
            cur = next((p for p in pods if p["metadata"]["uid"] == s.uid), None)
            if cur is None or cur["metadata"].get("deletionTimestamp") or (
                    cur["status"].get("phase") in TERMINAL):
                s.sigterm()  # the kubelet's SIGTERM: save at the step boundary, exit 143
                saved = s.saved() or {}
                job.stop_saved = saved.get("step")
                if self._arm_corrupt is not None and self._arm_corrupt[1] == "sigterm" and (
                        saved.get("reason") == "sigterm"):
                    self._corrupt(job, saved["checkpoint"], self._arm_corrupt[0],
                                  "(its SIGTERM save, before the restart)")
                return
            before = (s.saved() or {}).get("checkpoint")
            s.run_steps(1)
            s.ckpt.reporter.report(0.1 + 0.9 * math.exp(-s.step / job.tau), step=s.step)
            saved = s.saved() or {}
            rid = saved.get("request")
            if saved.get("checkpoint") != before and rid and rid not in job.request_steps:
                # the first save that answers this request: the one its agent verifies
                job.request_steps[rid] = int(saved["step"])
                if self._arm_corrupt is not None and self._arm_corrupt[1] == "request" and (
                        saved.get("reason") == "request"):
                    self._corrupt(job, saved["checkpoint"], self._arm_corrupt[0],
                                  "(saved for a migration, before its agent verifies it)")
            if s.step >= job.steps and s.running:
                self.plane.complete_pod(self.ns, s.pod)
                job.done = True
                job.completed_at = time.monotonic()
                s.exit_code = 0
            return
        if (s.starts > 0 and s.exit_code is None) or job.deleted is not None:
            return
        cur = next((p for p in pods if p["metadata"]["uid"] == s.uid and _live(p)), None)
        if cur is not None:
            # The job exited in a pod that lives on: the kubelet restarts the container
            # (restartPolicy Always) after its first back-off, 10 s.
            job.exited_at = job.exited_at or time.monotonic()
            if time.monotonic() - job.exited_at >= 10:
                job.exited_at = None
                s.start(cur)
                s.ckpt.every = PERIODIC
                r = s.resumed
                if r is not None and r.name in job.corrupted:
                    raise Violation(f"{job.name}: restarted from the corrupted checkpoint {r.name}")
                self.log(f"  {job.name} restarted in place at step {s.step}")
            return
        for p in pods:
            cs = (p["status"].get("containerStatuses") or [{}])[0]
            if _live(p) and cs.get("containerID") and p["metadata"]["uid"] != s.uid:
                stopped = s.stopped_at
                s.start(p)
                s.ckpt.every = PERIODIC
                if s.starts > 1:
                    self._check_resume(job, p, stopped)
                break

    def _check_resume(self, job: Job, pod: dict[str, Any], stopped: Any) -> None:
        s = job.standin
        job.moves += 1
        r = s.resumed
        request = (pod["metadata"].get("annotations") or {}).get("specon.io/migrated", "")
        if r is None:
            raise Violation(f"{job.name}: restarted in {pod['metadata']['name']} from nothing")
        floor = job.request_steps.get(request)
        if floor is None:
            raise Violation(f"{job.name}: replacement {pod['metadata']['name']} names request "
                            f"{request!r}, for which no checkpoint was saved")
        if r.step < floor:
            raise Violation(f"{job.name}: resumed at step {r.step}, before the verified "
                            f"checkpoint's step {floor} (request {request})")
        if r.name in job.corrupted:
            raise Violation(f"{job.name}: resumed from the corrupted checkpoint {r.name}")
        # where it stopped; where its last good save was, when the SIGTERM save failed
        want = stopped[0] if stopped is not None and job.stop_saved in (None, stopped[0]) else (
            job.stop_saved)
        if stopped is not None and r.step != want and not job.corrupted:
            raise Violation(f"{job.name}: stopped at step {stopped[0]} (its last good save: "
                            f"step {job.stop_saved}), resumed at {r.step}")
        self.log(f"  {job.name} moved to {s.node} ({pod['metadata']['name']}), resumed at "
                 f"step {r.step} (verified {floor})")

    def _corrupt(self, job: Job, checkpoint: str, rec: FaultRecord, how: str) -> None:
        d = job.standin.directory
        try:
            manifest = json.loads((d / f"{checkpoint}.json").read_text())
            data = d / manifest["file"]
            size = data.stat().st_size
            with data.open("r+b") as f:
                f.truncate(size // 2)
        except (OSError, ValueError, KeyError) as exc:
            rec.detail = f"could not corrupt {job.name}/{checkpoint}: {exc}"
            return
        job.corrupted.add(checkpoint)
        rec.detail = f"{job.name}/{checkpoint} truncated {size}->{size // 2} B {how}"
        self._arm_corrupt = None

    # -- health --------------------------------------------------------------------------------
    def leader(self) -> ManagerProcess | None:
        ready = self.relay.ready()
        return ready[0] if len(ready) == 1 else None

    def healthy(self, since: float) -> bool:
        """One replica ready; it knows every node fresh; every agent running and heard since
        ``since`` (its heartbeat counter moved); the scheduler placing (no pod of ours pending
        for more than 20 s)."""
        lead = self.leader()
        if lead is None:
            return False
        try:
            text = httpx.get(f"{lead.url}/metrics", timeout=2).text
        except httpx.HTTPError:
            return False
        if (_metric(text, "specon_nodes", state="fresh") or 0) < len(self.nodes):
            return False
        for a in self.agents.values():
            if a.frozen or a.proc is None or a.proc.poll() is not None:
                return False
            if a.heartbeats_ok() <= self._hb_base.get(a.node, 0.0):
                return False
        return self.engine is None or self.engine.healthy()

    def wait_healthy(self, lifted: float, timeout: float = 120) -> float | None:
        self._hb_base = {n: a.heartbeats_ok() for n, a in self.agents.items()}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy(lifted):
                return time.monotonic()
            time.sleep(0.1)
        return None

    # -- faults --------------------------------------------------------------------------------
    def inject(self, kind: str, outage_s: tuple[float, float] = (5, 30)) -> FaultRecord:
        """Inject one fault, wait for the recovery, then check what must hold after it (the
        injector's check, if it returns one)."""
        rec = FaultRecord(kind, time.monotonic())
        self.faults.append(rec)
        fn = second_round.INJECTORS.get(kind) or getattr(self, "_f_" + kind.replace("-", "_"))
        after = None
        try:
            after = fn(self, rec, outage_s) if kind in second_round.INJECTORS else fn(
                rec, outage_s)
        except Violation as exc:
            self.violations.append(str(exc))
            self.log(f"VIOLATION: {exc}")
        rec.lifted = rec.lifted or time.monotonic()
        rec.recovered = self.wait_healthy(rec.lifted)
        if rec.recovered is None:
            self.violations.append(f"{kind}: not recovered within 120 s ({rec.detail}); "
                                   f"{self.diagnose()}")
        elif after is not None:
            try:
                after()
            except Violation as exc:
                self.violations.append(str(exc))
                self.log(f"VIOLATION: {exc}")
        self.log(f"[{len(self.faults):3d}] {kind:18s} {rec.detail:60s} recovered in "
                 f"{rec.recover_s if rec.recover_s is not None else float('nan'):.1f} s")
        return rec

    def _the_leader(self) -> ManagerProcess:
        for _ in range(100):
            lead = self.leader()
            if lead is not None:
                return lead
            time.sleep(0.1)
        raise Violation(f"no single ready replica to fault: {self.diagnose()}")

    def _f_manager_kill(self, rec: FaultRecord, _: Any) -> None:
        time.sleep(self.rng.uniform(0, 2))
        m = self._the_leader()
        m.kill()
        down = self.rng.uniform(1, 3)
        rec.detail = f"{m.settings['identity']} killed, back after {down:.1f} s"
        time.sleep(down)
        m.start(wait="serving")
        rec.lifted = time.monotonic()

    def _f_lease_split(self, rec: FaultRecord, _: Any) -> None:
        m = self._the_leader()
        assert m.proc is not None
        m.proc.send_signal(signal.SIGSTOP)
        m.frozen = True  # type: ignore[attr-defined]
        frozen = LEASE["lease_duration_s"] + self.rng.uniform(1, 3)
        rec.detail = f"{m.settings['identity']} frozen {frozen:.1f} s (Lease 3 s)"
        time.sleep(frozen)
        m.proc.send_signal(signal.SIGCONT)
        m.frozen = False  # type: ignore[attr-defined]
        rec.lifted = time.monotonic()

    def _f_apiserver_outage(self, rec: FaultRecord, outage_s: tuple[float, float]) -> None:
        self._restart("kube-apiserver", self.rng.uniform(*outage_s), rec)

    def _f_etcd_restart(self, rec: FaultRecord, _: Any) -> None:
        self._restart("etcd", self.rng.uniform(1, 3), rec)

    def _restart(self, component: str, down: float, rec: FaultRecord) -> None:
        comp = self.plane.components[component]
        comp.stop()
        rec.detail = f"{component} down {down:.1f} s"
        time.sleep(down)
        comp.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if self.plane._readyz():
                    break
            time.sleep(0.2)
        rec.lifted = time.monotonic()

    def _f_agent_kill(self, rec: FaultRecord, _: Any) -> None:
        a = self.agents[self.rng.choice(self.nodes)]
        a.kill()
        down = self.rng.uniform(0.5, 3)
        rec.detail = f"agent of {a.node} killed, back after {down:.1f} s"
        time.sleep(down)
        a.start()
        rec.lifted = time.monotonic()

    def _f_node_notready(self, rec: FaultRecord, _: Any) -> None:
        node = self.rng.choice(self.nodes)
        a = self.agents[node]
        a.signal(signal.SIGSTOP)
        self._ready_condition(node, "False")
        held = self.rng.uniform(3, 8)
        rec.detail = f"{node} NotReady, its agent frozen {held:.1f} s"
        time.sleep(held)
        self._ready_condition(node, "True")
        a.signal(signal.SIGCONT)
        rec.lifted = time.monotonic()

    def _ready_condition(self, node: str, status: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {"status": {"conditions": [{
            "type": "Ready", "status": status, "reason": "CampaignFault" if status == "False"
            else "KubeletReady", "message": "fault injected by the campaign",
            "lastHeartbeatTime": now, "lastTransitionTime": now}]}}
        self.plane.kubectl("patch", "node", node, "--subresource=status", "--type=strategic",
                           "-p", json.dumps(body))

    def _f_corrupt_checkpoint(self, rec: FaultRecord, _: Any) -> None:
        """Arm: the next checkpoint saved for a migration's request (its agent must not verify
        it: the migration is cancelled) or the next SIGTERM save (the restart must fall back to
        an older good one) is truncated; if none comes within 8 s, the newest checkpoint of a
        running job is."""
        with self._lock:
            self._arm_corrupt = (rec, self.rng.choice(["request", "sigterm"]))
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and self._arm_corrupt is not None:
            time.sleep(0.1)
        with self._lock:
            if self._arm_corrupt is None:
                return
            running = [j for j in self.jobs.values() if j.standin.running and not j.done
                       and j.standin.saved()]
            if running:
                job = self.rng.choice(running)
                saved = job.standin.saved() or {}
                self._corrupt(job, saved["checkpoint"], rec, "(newest, no request came)")
            else:
                rec.detail = "no checkpoint to corrupt"
            self._arm_corrupt = None

    def _f_engine_restart(self, rec: FaultRecord, _: Any) -> None:
        assert self.engine is not None
        self.engine.restart(rec)

    def _f_heartbeat_storm(self, rec: FaultRecord, _: Any) -> None:
        lasting = self.rng.uniform(2, 5)
        counts: dict[str, int] = {}
        stop = time.monotonic() + lasting
        victim, liar = self.rng.sample(self.nodes, 2)

        def storm(kind: str) -> None:
            with httpx.Client(base_url=self.relay.url, timeout=2) as c:
                n = 0
                while time.monotonic() < stop:
                    body: Any = {"node": victim, "time": time.time(), "seq": 1,
                                 "capacity_cpus": 4, "load_cores": 0, "jobs": []}
                    headers = {"Authorization": f"Bearer {self.tokens[liar]}"}
                    if kind == "bad-token":
                        headers = {"Authorization": f"Bearer {uuid.uuid4().hex}"}
                    elif kind == "oversized":
                        body["jobs"] = [{"namespace": self.ns, "pod": f"p{i}",
                                         "category": "PC"} for i in range(5000)]
                    elif kind == "replay":
                        body["node"] = liar
                        body["seq"] = 0
                    with contextlib.suppress(httpx.HTTPError):
                        c.post("/v1/heartbeat", content=json.dumps(body).encode(),
                               headers={**headers, "Content-Type": "application/json"})
                    n += 1
                counts[kind] = n

        threads = [threading.Thread(target=storm, args=(k,)) for k in
                   ("bad-token", "spoof", "oversized", "replay")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rec.detail = f"{sum(counts.values())} bad heartbeats in {lasting:.1f} s"
        rec.lifted = time.monotonic()

    # -- the end -------------------------------------------------------------------------------
    def finish(self, drain_timeout: float = 240) -> None:
        """Agents leave (clean stop) while jobs still run: every limit back to its owner's.
        Then the remaining jobs run to their end: none lost."""
        with self._lock:
            self.submitting = False
        codes = {n: a.stop() for n, a in self.agents.items()}
        bad = {n: c for n, c in codes.items() if c != 0}
        if bad:
            self.violations.append(f"agents exited non-zero on SIGTERM: {bad}")
        for p in self.api.pods(self.ns):
            if not _live(p) or "campaign-job" not in (p["metadata"].get("labels") or {}):
                continue
            lim = p["spec"]["containers"][0].get("resources", {}).get("limits", {}).get("cpu")
            if lim is None or parse_cpu(lim) != parse_cpu(OWNER_LIMIT):
                self.violations.append(f"{p['metadata']['name']}: CPU limit {lim} after the "
                                       f"agents left, its owner set {OWNER_LIMIT}")
        if self.engine is not None:
            self.engine.finish(self.violations)
        deadline = time.monotonic() + drain_timeout
        while time.monotonic() < deadline and not all(
                j.done or j.deleted is not None for j in self.jobs.values()):
            time.sleep(0.5)
        lost = [j.name for j in self.jobs.values() if not j.done and j.deleted is None]
        if lost:
            self.violations.append(f"jobs never completed (lost): {lost}; {self.diagnose()}")

    def diagnose(self) -> str:
        states = [f"{m.settings['identity']}: alive={m.alive()} ready={_answers(m, '/readyz')}"
                  for m in self.managers]
        agents = [f"{n}: hb_ok={a.heartbeats_ok()} alive={a.alive()}"
                  for n, a in self.agents.items()]
        return "; ".join(states + agents)


# -- a run -----------------------------------------------------------------------------------
def draw(rng: random.Random, n: int, kinds: tuple[str, ...] = KINDS) -> list[str]:
    """``n`` fault kinds, every kind at least once when ``n`` allows, in a random order."""
    out = list(kinds) * (n // len(kinds)) + rng.sample(list(kinds), n % len(kinds))
    rng.shuffle(out)
    return out


def run(world: World, faults: int | list[str], gap_s: tuple[float, float] = (1, 4),
        outage_s: tuple[float, float] = (5, 30)) -> None:
    """``faults``: how many, drawn by :func:`draw`; or which, injected in a random order."""
    world.start()
    if isinstance(faults, int):
        plan = draw(world.rng, faults, world.kinds)
    else:
        plan = [k for k in faults if k in world.kinds]
        world.rng.shuffle(plan)
    for kind in plan:
        time.sleep(world.rng.uniform(*gap_s))
        world.inject(kind, outage_s)
    world.finish()


def table(faults: list[FaultRecord]) -> list[dict[str, Any]]:
    rows = []
    for kind in KINDS:
        fs = [f for f in faults if f.kind == kind]
        if not fs:
            continue
        rec = [f.recover_s for f in fs if f.recover_s is not None]
        rows.append({"kind": kind, "count": len(fs), "recovered": len(rec),
                     "median_s": statistics.median(rec) if rec else None,
                     "max_s": max(rec) if rec else None})
    return rows


def env_ok() -> bool:
    return bool(os.environ.get("SPECON_TESTPLANE_BIN"))
