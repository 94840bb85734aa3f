"""End to end with the real kube-scheduler: pods scheduled per second with the SpeCon extender
against the same kube-scheduler without it, on KWOK nodes of the test plane.

Usage: python benchmarks/e2e_scheduler.py [--nodes 1000 [5000 ...]] [--pods 2000] [--repeats 3]
       [--percentage-of-nodes-to-score N] [--manager-nice N]

Needs the test plane's binaries (``SPECON_TESTPLANE_BIN``, see docs/testplane.md). Starts a
plane and the real manager (``python -m specon_manager``, no controllers), which gets one
heartbeat per node (0-3 jobs each, different mixes, so the scores differ). For each of
``--nodes`` in turn (the plane grows to it: KWOK nodes are slow to add), then, for each
scheduler in turn — ``specon``
(filter and prioritize by the extender, as the chart configures it: ``nodeCacheCapable:
true``, ``ignorable: true``, ``weight: 5``, ``httpTimeout: 5s``; plain HTTP on loopback
instead of the chart's mutual TLS) and ``plain`` (the same kube-scheduler, the same
configuration without the ``extenders`` list) — creates ``--pods`` training pods for it while
it is stopped, starts it and times the bindings: pods per second from the first bound pod to
the last, and the manager's CPU meanwhile. Both get the same configuration otherwise,
printed at the start: client QPS 1,000 and burst 2,000 (so the API client's rate limit is not
what is measured), no leader election, ``percentageOfNodesToScore`` as given (default: unset,
kube-scheduler's adaptive default in both). The arms alternate, ``--repeats`` times each.
Prints the manager's extender latency histogram
(``specon_manager_extender_request_duration_seconds``) and the scheduler's own mean
scheduling-algorithm time per attempt (``scheduler_scheduling_algorithm_duration_seconds``, the
extender's calls included), read from its ``/metrics``, which it serves unauthenticated here
(``--authorization-always-allow-paths`` with ``/metrics`` added).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from planelib import KWOK_NODE_ANNOTATION, Plane, require_bin_dir  # noqa: E402

CATS = ("PC", "WC", "CC")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_manager(nodes: list[str], tmp: Path, nice: int = 0
                  ) -> tuple[subprocess.Popen[bytes], int]:
    tok = tmp / "tokens"
    tok.write_text("".join(f"e2e-benchmark-token-{i:08d} {n}\n" for i, n in enumerate(nodes)))
    port = free_port()
    env = {**os.environ, "SPECON_MANAGER_KUBERNETES": "false",
           "SPECON_MANAGER_HOST": "127.0.0.1", "SPECON_MANAGER_PORT": str(port),
           "SPECON_MANAGER_TOKENS_FILE": str(tok), "SPECON_MANAGER_LOG_LEVEL": "warning",
           "SPECON_MANAGER_HEARTBEAT_INTERVAL_S": "3600"}
    proc = subprocess.Popen([sys.executable, "-m", "specon_manager"], env=env, cwd=REPO,
                            preexec_fn=(lambda: os.nice(nice)) if nice else None)
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                break
        except OSError:
            time.sleep(0.1)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for i, n in enumerate(nodes):
        body = json.dumps({"node": n, "time": time.time(), "seq": 1, "capacity_cpus": 4,
                           "load_cores": float(i % 4), "jobs": [
                               {"namespace": "default", "pod": f"{n}-{k}",
                                "category": CATS[(i + k) % 3]} for k in range(i % 4)]})
        c.request("POST", "/v1/heartbeat", body=body, headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer e2e-benchmark-token-{i:08d}"})
        r = c.getresponse()
        r.read()
        assert r.status == 200, r.status
    c.close()
    return proc, port


def add_nodes(plane: Plane, first: int, n: int, prefix: str, timeout: float) -> list[str]:
    """KWOK nodes ``{prefix}-{first}`` .. ``{prefix}-{n - 1}`` (as :meth:`Plane.add_nodes` makes
    them, 16 at a time), and wait until ``n`` are Ready."""
    from kubernetes import client

    core = client.CoreV1Api(plane.api_client())
    names = [f"{prefix}-{i}" for i in range(first, n)]
    res = {"cpu": "4", "memory": "8Gi", "pods": "110"}

    def one(name: str) -> None:
        core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "annotations": {KWOK_NODE_ANNOTATION: "fake",
                                          "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "type": "kwok"}},
            "spec": {}, "status": {"capacity": res, "allocatable": res}})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, names))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = 0
        for node in core.list_node(label_selector="type=kwok").items:
            conds = {c.type: c.status for c in (node.status.conditions or [])}
            taints = [t.key for t in (node.spec.taints or [])]
            if conds.get("Ready") == "True" and "node.kubernetes.io/not-ready" not in taints:
                ready += 1
        if ready >= n:
            return names
        time.sleep(2)
    raise RuntimeError(f"only {ready} of {n} KWOK nodes Ready after {timeout:.0f} s")


def create_pods(core: Any, namespace: str, prefix: str, n: int, scheduler: str) -> None:
    def one(i: int) -> None:
        core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{prefix}{i}",
                         "labels": {"specon.io/training": "true"}},
            "spec": {"schedulerName": scheduler, "containers": [{"name": "main",
                                                                 "image": "train"}]}})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(n)))


def time_bindings(core: Any, namespace: str, prefix: str, n: int, timeout: float
                  ) -> tuple[float, int]:
    """Pods per second from the first bound to the last (bound = spec.nodeName set)."""
    first = last = None
    deadline = time.monotonic() + timeout
    bound = 0
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod(namespace).items
        bound = sum(1 for p in pods if p.metadata.name.startswith(prefix) and p.spec.node_name)
        now = time.monotonic()
        if bound and first is None:
            first = (now, bound)
        if bound >= n:
            last = (now, bound)
            break
        time.sleep(0.2)
    if first is None or last is None or last[0] <= first[0]:
        return float("nan"), bound
    return (last[1] - first[1]) / (last[0] - first[0]), bound


#: The scheduler's histograms worth printing (sum and count: the mean per pod).
SCHED_METRICS = ("scheduler_scheduling_algorithm_duration_seconds_sum",
                 "scheduler_scheduling_algorithm_duration_seconds_count",
                 "scheduler_pod_scheduling_sli_duration_seconds_sum",
                 "scheduler_pod_scheduling_sli_duration_seconds_count")


def scheduler_metrics(plane: Plane, key: str) -> dict[str, float]:
    """The scheduler's own figures from its /metrics (served unauthenticated, see above): the
    scheduling algorithm's time (the extender's calls included) and its extender lines."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{plane.ports[key]}/metrics", context=ctx,
                                    timeout=10) as r:
            text = r.read().decode()
    except OSError as exc:
        print(f"   (scheduler metrics not read: {exc})")
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in SCHED_METRICS or "extender" in line.lower():
            key_ = line.rsplit(" ", 1)[0]
            out[key_] = out.get(key_, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(args: Any, plane: Plane, core: Any, ns: str, n_nodes: int, conn: dict[str, Any],
            extender: list[dict[str, Any]], sched_args: list[str], manager_pid: int) -> None:
    rates: dict[str, list[float]] = {"specon": [], "plain": []}
    for run in range(args.repeats):
        for name in ("specon", "plain"):
            tag = f"{name}-{n_nodes}-{run}-"
            create_pods(core, ns, tag, args.pods, name)
            cpu0, t0 = cpu_s(manager_pid), time.monotonic()
            plane.run_scheduler(name, extenders=extender if name == "specon" else None,
                                config=conn, args=sched_args)
            rate, bound = time_bindings(core, ns, tag, args.pods, args.timeout)
            cpu = (cpu_s(manager_pid) - cpu0) / (time.monotonic() - t0)
            rates[name].append(rate)
            print(f"{n_nodes} nodes, run {run}: {name:<7} {rate:7.1f} pods/s ({bound}/{args.pods}"
                  f" bound; manager CPU {100 * cpu:.0f}% of a core)", flush=True)
            got = scheduler_metrics(plane, f"scheduler-{name}")
            alg = [v for k, v in got.items() if k.startswith(
                "scheduler_scheduling_algorithm_duration_seconds_")]
            if len(alg) == 2 and alg[1]:
                print(f"   scheduler: scheduling algorithm {1000 * alg[0] / alg[1]:.2f} ms per "
                      f"attempt (mean of {alg[1]:.0f})")
            for k, v in got.items():
                if "extender" in k.lower():
                    print(f"   scheduler: {k} {v:g}")
            plane.stop_scheduler(name)
            core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            while core.list_namespaced_pod(ns).items:
                time.sleep(0.5)
    sp, pl = rates["specon"], rates["plain"]
    pairs = [s / p for s, p in zip(sp, pl, strict=True)]
    ratio = statistics.median(sp) / statistics.median(pl)
    print(f"{n_nodes} nodes: specon/plain median {statistics.median(sp):.1f} / "
          f"{statistics.median(pl):.1f} pods/s = {ratio:.0%}"
          f"; per run {[f'{x:.0%}' for x in pairs]} (runs: {[round(x, 1) for x in sp]} / "
          f"{[round(x, 1) for x in pl]})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000])
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--percentage-of-nodes-to-score", type=int, default=None)
    ap.add_argument("--manager-nice", type=int, default=0,
                    help="a diagnostic: the manager's niceness relative to the rest (negative: "
                         "it gets the CPU first; needs the privilege)")
    args = ap.parse_args()
    from kubernetes import client

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        plane = Plane(bin_dir=require_bin_dir(), workdir=tmp / "plane")
        plane.start()
        manager = None
        try:
            names = [f"e2e-{i}" for i in range(max(args.nodes))]
            manager, port = start_manager(names, tmp, args.manager_nice)
            core = client.CoreV1Api(plane.api_client())
            ns = "e2e-bench"
            core.create_namespace({"metadata": {"name": ns}})
            conn: dict[str, Any] = {"clientConnection": {
                "kubeconfig": str(plane.kubeconfig), "qps": 1000, "burst": 2000}}
            if args.percentage_of_nodes_to_score is not None:
                conn["percentageOfNodesToScore"] = args.percentage_of_nodes_to_score
            # As the chart's (charts/specon/templates/_helpers.tpl), without TLS.
            extender = [{"urlPrefix": f"http://127.0.0.1:{port}", "filterVerb": "filter",
                         "prioritizeVerb": "prioritize", "weight": 5, "nodeCacheCapable": True,
                         "ignorable": True, "httpTimeout": "5s"}]
            sched_args = ["--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"]
            print(f"both arms: {json.dumps(conn)} and {sched_args}; specon adds "
                  f"extenders: {json.dumps(extender)}", flush=True)
            have = 0
            for n_nodes in sorted(args.nodes):
                t0 = time.monotonic()
                add_nodes(plane, have, n_nodes, "e2e", timeout=3600)
                have = n_nodes
                print(f"{n_nodes} KWOK nodes Ready ({time.monotonic() - t0:.0f} s to add)",
                      flush=True)
                measure(args, plane, core, ns, n_nodes, conn, extender, sched_args, manager.pid)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
                for line in r.read().decode().splitlines():
                    bucket = "specon_manager_extender_request_duration_seconds_bucket"
                    if line.startswith(bucket) and (
                            'le="0.001"' in line or 'le="0.005"' in line or 'le="0.01"' in line
                            or 'le="+Inf"' in line):
                        print("   manager (all stages):", line)
        finally:
            if manager is not None:
                manager.terminate()
                manager.wait(10)
            plane.stop()


if __name__ == "__main__":
    main()
