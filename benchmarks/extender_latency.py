"""Extender latency and heartbeat throughput of the real manager process.

Usage: python benchmarks/extender_latency.py [--nodes 100 1000 5000] [--calls 200]
       [--heartbeat-seconds 5] [--clients 8]

Starts ``python -m specon_manager`` (no Kubernetes) on a loopback port, registers N nodes by
heartbeat (each with 3 jobs), then times kube-scheduler's calls over HTTP from another
process: filter and prioritize with NodeNames (nodeCacheCapable: true) and with full Node
objects (false), p50 and p99 over ``--calls`` calls. Then measures accepted heartbeats per
second from ``--clients`` concurrent clients. The scheduler's default extender timeout is 5 s
(httpTimeout); the target is p99 well under it (under 100 ms at 5,000 nodes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_obj(name: str) -> dict[str, Any]:
    # roughly the size of a real Node object (labels, capacity, conditions, images)
    return {"metadata": {"name": name, "uid": "u" * 36, "labels": {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch":
        "amd64", "topology.kubernetes.io/zone": "zone-a"}, "annotations": {"a": "b" * 60}},
        "spec": {"podCIDR": "10.0.0.0/24"},
        "status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                   "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                   "conditions": [{"type": t, "status": "False", "reason": "Fine" * 4,
                                   "message": "kubelet is fine" * 3} for t in
                                  ("MemoryPressure", "DiskPressure", "PIDPressure")],
                   "images": [{"names": [f"registry/image-{i}:v1"], "sizeBytes": 100_000_000}
                              for i in range(10)]}}


POD = {"metadata": {"name": "train-1", "namespace": "default", "uid": "u-1",
                    "labels": {"specon.io/training": "true"}},
       "spec": {"schedulerName": "specon", "containers": [{"name": "main", "image": "x"}]}}


def heartbeat(node: str, seq: int) -> dict[str, Any]:
    return {"node": node, "time": time.time(), "seq": seq, "capacity_cpus": 16,
            "load_cores": 4.0, "jobs": [{"namespace": "default", "pod": f"{node}-{k}",
                                         "category": c} for k, c in enumerate(["PC", "WC", "CC"])]}


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--heartbeat-seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=8)
    args = ap.parse_args()
    biggest = max(args.nodes)
    names = [f"node-{i}" for i in range(biggest)]
    tokens = {n: f"benchmark-token-{i:08d}" for i, n in enumerate(names)}
    with tempfile.TemporaryDirectory() as tmp:
        tok = Path(tmp) / "tokens"
        tok.write_text("".join(f"{t} {n}\n" for n, t in tokens.items()))
        port = free_port()
        env = {**os.environ, "SPECON_MANAGER_KUBERNETES": "false",
               "SPECON_MANAGER_HOST": "127.0.0.1", "SPECON_MANAGER_PORT": str(port),
               "SPECON_MANAGER_TOKENS_FILE": str(tok), "SPECON_MANAGER_LOG_LEVEL": "warning"}
        proc = subprocess.Popen([sys.executable, "-m", "specon_manager"], env=env, cwd=REPO)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(200):
                try:
                    if httpx.get(f"{url}/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            with httpx.Client(base_url=url, timeout=30) as c:
                for n in names:
                    r = c.post("/v1/heartbeat", json=heartbeat(n, 1),
                               headers={"Authorization": f"Bearer {tokens[n]}"})
                    r.raise_for_status()
                print(f"{'nodes':>6} {'call':<22} {'p50 ms':>8} {'p99 ms':>8} {'body KB':>8}")
                for n in args.nodes:
                    sub = names[:n]
                    bodies = {"NodeNames": {"Pod": POD, "NodeNames": sub},
                              "Nodes": {"Pod": POD, "Nodes": {"items": [node_obj(x)
                                                                        for x in sub]}}}
                    for form, body in bodies.items():
                        raw = httpx.Request("POST", "/", json=body).content
                        for verb in ("filter", "prioritize"):
                            times = []
                            for _ in range(args.calls):
                                t0 = time.perf_counter()
                                r = c.post(f"/{verb}", content=raw,
                                           headers={"Content-Type": "application/json"})
                                times.append(time.perf_counter() - t0)
                                r.raise_for_status()
                            print(f"{n:>6} {verb + ' ' + form:<22} "
                                  f"{1000 * statistics.median(times):>8.2f} "
                                  f"{1000 * pct(times, 99):>8.2f} {len(raw) / 1024:>8.0f}",
                                  flush=True)
            # heartbeat throughput: clients in threads of this (separate) process
            stop = time.monotonic() + args.heartbeat_seconds
            counts = [0] * args.clients
            errors = [0] * args.clients

            def client(i: int) -> None:
                seq = 1
                with httpx.Client(base_url=url, timeout=30) as c:
                    while time.monotonic() < stop:
                        n = names[(i * 7919 + seq) % len(names)]
                        seq += 1
                        r = c.post("/v1/heartbeat", json=heartbeat(n, seq),
                                   headers={"Authorization": f"Bearer {tokens[n]}"})
                        if r.status_code == 200:
                            counts[i] += 1
                        else:
                            errors[i] += 1

            threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - t0
            print(f"heartbeats: {sum(counts) / elapsed:.0f}/s accepted ({sum(counts)} in "
                  f"{elapsed:.1f} s, {args.clients} clients, 3 jobs each, {sum(errors)} "
                  "refused)")
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
