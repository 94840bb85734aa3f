"""End to end with the real kube-scheduler: pods scheduled per second with the SpeCon extender
against the same kube-scheduler without it, on KWOK nodes of the test plane.

Usage: python benchmarks/e2e_scheduler.py [--nodes 1000] [--pods 2000] [--repeats 2]

Needs the test plane's binaries (``SPECON_TESTPLANE_BIN``, see docs/testplane.md) and takes the
plane lock's place: run it alone. Starts a plane, adds ``--nodes`` KWOK nodes, starts the real
manager (``python -m specon_manager``, no controllers) and sends one heartbeat per node (3 jobs
each, different mixes, so the scores differ). Then, for each scheduler in turn — ``specon``
(filter and prioritize by the extender, ``nodeCacheCapable: true``, as the chart configures)
and ``plain`` (the same kube-scheduler and configuration without the extender) — creates
``--pods`` training pods for it while it is stopped, starts it and times the bindings: pods
per second from the first bound pod to the last. Both schedulers get the same client QPS
(1,000) so the API client's rate limit is not what is measured. Prints the manager's extender
latency histogram (``specon_extender_request_duration_seconds``) and the scheduler's own
extender metrics where it exports them.
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

from planelib import Plane, require_bin_dir  # noqa: E402

CATS = ("PC", "WC", "CC")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_manager(nodes: list[str], tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    tok = tmp / "tokens"
    tok.write_text("".join(f"e2e-benchmark-token-{i:08d} {n}\n" for i, n in enumerate(nodes)))
    port = free_port()
    env = {**os.environ, "SPECON_MANAGER_KUBERNETES": "false",
           "SPECON_MANAGER_HOST": "127.0.0.1", "SPECON_MANAGER_PORT": str(port),
           "SPECON_MANAGER_TOKENS_FILE": str(tok), "SPECON_MANAGER_LOG_LEVEL": "warning",
           "SPECON_MANAGER_HEARTBEAT_INTERVAL_S": "3600"}
    proc = subprocess.Popen([sys.executable, "-m", "specon_manager"], env=env, cwd=REPO)
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


def create_pods(core: Any, namespace: str, scheduler: str, n: int, run: int) -> None:
    def one(i: int) -> None:
        core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{scheduler}-{run}-{i}",
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


def scheduler_metrics(plane: Plane, key: str) -> list[str]:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(f"https://127.0.0.1:{plane.ports[key]}/metrics",
                                 headers={"Authorization": f"Bearer {plane.admin_token}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            text = r.read().decode()
    except OSError as exc:
        return [f"(scheduler metrics not read: {exc})"]
    return [line for line in text.splitlines() if "extender" in line.lower()
            and not line.startswith("#")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    from kubernetes import client

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        plane = Plane(bin_dir=require_bin_dir(), workdir=tmp / "plane")
        plane.start()
        manager = None
        try:
            t0 = time.monotonic()
            nodes = plane.add_nodes(args.nodes, pods=110, prefix="e2e", timeout=600)
            print(f"{len(nodes)} KWOK nodes Ready in {time.monotonic() - t0:.0f} s", flush=True)
            manager, port = start_manager(nodes, tmp)
            core = client.CoreV1Api(plane.api_client())
            ns = "e2e-bench"
            core.create_namespace({"metadata": {"name": ns}})
            conn = {"clientConnection": {"kubeconfig": str(plane.kubeconfig), "qps": 1000,
                                         "burst": 2000}}
            extender = [{"urlPrefix": f"http://127.0.0.1:{port}", "filterVerb": "filter",
                         "prioritizeVerb": "prioritize", "weight": 1, "nodeCacheCapable": True,
                         "httpTimeout": "5s"}]
            rates: dict[str, list[float]] = {"specon": [], "plain": []}
            for run in range(args.repeats):
                for name in ("specon", "plain"):
                    create_pods(core, ns, name, args.pods, run)
                    plane.run_scheduler(name, extenders=extender if name == "specon" else None,
                                        config=conn)
                    rate, bound = time_bindings(core, ns, f"{name}-{run}-", args.pods,
                                                args.timeout)
                    rates[name].append(rate)
                    print(f"run {run}: {name:<7} {rate:7.1f} pods/s ({bound}/{args.pods} bound)",
                          flush=True)
                    if name == "specon":
                        for line in scheduler_metrics(plane, f"scheduler-{name}")[:12]:
                            print("   scheduler:", line)
                    plane.stop_scheduler(name)
                    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
                    while core.list_namespaced_pod(ns).items:
                        time.sleep(0.5)
            sp, pl = rates["specon"], rates["plain"]
            print(f"specon/plain: median {statistics.median(sp):.1f} / "
                  f"{statistics.median(pl):.1f} pods/s = "
                  f"{statistics.median(sp) / statistics.median(pl):.0%} "
                  f"(runs: {[round(x, 1) for x in sp]} / {[round(x, 1) for x in pl]})")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("specon_extender_request_duration_seconds_bucket") and (
                            'le="0.001"' in line or 'le="0.005"' in line or 'le="0.01"' in line
                            or 'le="+Inf"' in line):
                        print("   manager:", line)
        finally:
            if manager is not None:
                manager.terminate()
                manager.wait(10)
            plane.stop()


if __name__ == "__main__":
    main()
