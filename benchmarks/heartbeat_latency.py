"""A heartbeat's latency while kube-scheduler's extender calls carry huge NodeNames lists.

Usage: python benchmarks/heartbeat_latency.py [--repeats 5] [--seconds 4] [--clients 3]
       [--names 0] [--manager-cpu 0] [--source DIR]

Starts the real manager (``python -m specon_manager``: uvicorn, no Kubernetes) on a loopback
port with a token per node, pinned to one CPU (``--manager-cpu``; -1: not pinned; the clients
run on the others, the extender's at nice 10 so that the heartbeat's own client is not the one
kept waiting), and registers ``--nodes`` nodes. Each repeat has two phases of
``--seconds`` each, in this order: *quiet*, one agent sends a heartbeat every 20 ms (one
keep-alive connection, the answer read in full) and nothing else runs; *loaded*, the same while
``--clients`` processes post ExtenderArgs with a NodeNames list back to back, alternately to
``/filter`` and ``/prioritize``. The names are ``node-0``, ``node-1``, ...; the first
``--nodes`` of them are nodes the manager knows. ``--names 0`` (the default) fills the list up
to the manager's body limit (``max_extender_body_bytes``, 4 MiB: about 300,000 names); another
number sends that many. Per phase the heartbeat's p50 and p99; per repeat the ratio
loaded/quiet, so that runs on different machines or commits compare by ratio. Printed: each
repeat, then the mean and its 95% interval (Student's t over the repeats) of each figure, and
the extender answers by status with the manager's CPU a call.

``--source DIR`` starts the manager from another checkout (its ``specon_manager`` first on the
path), to measure a commit against this one with the same client. Everything stays on loopback;
the numbers depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from manager_scale import POD, REPO, free_port, pct, token, wait_healthy  # this folder's
from scipy import stats


def hb_body(i: int, seq: int) -> bytes:
    node = f"node-{i}"
    return json.dumps({"node": node, "time": time.time(), "seq": seq, "boot": "bench",
                       "capacity_cpus": 16, "load_cores": 2.0, "jobs": [
                           {"namespace": "default", "pod": f"{node}-{k}", "uid": f"u-{i}-{k}",
                            "category": "PC"} for k in range(3)]}).encode()


def names_body(limit: int, count: int) -> bytes:
    """ExtenderArgs with ``count`` NodeNames, or (0) as many as fit under ``limit`` bytes."""
    # as kube-scheduler writes it (Go's encoding/json: no spaces), without the closing "[]}"
    head = json.dumps({"Pod": POD, "NodeNames": []}, separators=(",", ":"))[:-3].encode()
    if not count:  # names are node-0, node-1, ...: most take 12 bytes with quotes and comma
        count = (limit - len(head) - 64) // 12
        while len(head) + sum(len(str(i)) + 8 for i in range(count)) + 1 > limit:
            count -= 1000
    names = [f"node-{i}" for i in range(count)]
    return head + json.dumps(names, separators=(",", ":")).encode() + b"}"


def cpu_s(pid: int) -> float:
    """A process's CPU seconds (user and system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def heartbeats(port: int, seconds: float, seq0: int) -> list[float]:
    """One agent's heartbeat every 20 ms for ``seconds``: each one's latency (s)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    times: list[float] = []
    stop = time.monotonic() + seconds
    seq = seq0
    while time.monotonic() < stop:
        seq += 1
        body = hb_body(0, seq)
        t0 = time.perf_counter()
        c.request("POST", "/v1/heartbeat", body=body, headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {token(0)}"})
        r = c.getresponse()
        out = r.read()
        times.append(time.perf_counter() - t0)
        assert r.status == 200 and b'"accepted":true' in out, (r.status, out[:200])
        time.sleep(0.02)
    c.close()
    return times


def flood(port: int, body: bytes, stop: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    os.nice(10)
    counts: dict[int, int] = {}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    verbs = ("/filter", "/prioritize")
    i = 0
    while time.monotonic() < stop:
        try:
            c.request("POST", verbs[i % 2], body=body,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            counts[r.status] = counts.get(r.status, 0) + 1
            if r.getheader("connection", "").lower() == "close":
                c.close()
        except (OSError, http.client.HTTPException):
            counts[0] = counts.get(0, 0) + 1
            c.close()
        i += 1
    c.close()
    out.put(counts)


def mean_ci(xs: list[float]) -> str:
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return f"{m:.2f}"
    half = stats.t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5
    return f"{m:.2f} [{m - half:.2f}, {m + half:.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--names", type=int, default=0)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--manager-cpu", type=int, default=0)
    ap.add_argument("--source", type=Path, default=REPO)
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    mcpu = args.manager_cpu if args.manager_cpu in cpus and len(cpus) > 1 else None
    if mcpu is not None:
        os.sched_setaffinity(0, set(cpus) - {mcpu})
    source = args.source.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        tok = Path(tmp) / "tokens"
        tok.write_text("".join(f"{token(i)} node-{i}\n" for i in range(args.nodes)))
        port = free_port()
        env = {**os.environ, "SPECON_MANAGER_KUBERNETES": "false",
               "SPECON_MANAGER_HOST": "127.0.0.1", "SPECON_MANAGER_PORT": str(port),
               "SPECON_MANAGER_TOKENS_FILE": str(tok), "SPECON_MANAGER_LOG_LEVEL": "warning",
               "PYTHONPATH": str(source)}
        limit = int(env.get("SPECON_MANAGER_MAX_EXTENDER_BODY_BYTES", 4 * 1024 * 1024))
        body = names_body(limit, args.names)
        proc = subprocess.Popen(
            [sys.executable, "-m", "specon_manager"], env=env, cwd=source,
            preexec_fn=(lambda: os.sched_setaffinity(0, {mcpu})) if mcpu is not None else None)
        try:
            wait_healthy(port)
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            for i in range(args.nodes):  # the first --nodes of the names are known nodes
                c.request("POST", "/v1/heartbeat", body=hb_body(i, 1), headers={
                    "Content-Type": "application/json", "Authorization": f"Bearer {token(i)}"})
                r = c.getresponse()
                r.read()
                assert r.status == 200
            c.close()
            n_names = len(json.loads(body)["NodeNames"])
            print(f"manager from {source.name} on CPU {mcpu} of {len(cpus)}; {args.clients} "
                  f"clients posting {len(body) / 2**20:.2f} MiB bodies of {n_names} NodeNames")
            print(f"{'repeat':>6} {'quiet p50/p99 ms':>18} {'loaded p50/p99 ms':>19} "
                  f"{'p50 x':>7} {'p99 x':>7}")
            rows: list[tuple[float, float, float, float]] = []
            answers: dict[int, int] = {}
            cpu_loaded = 0.0
            seq = 1
            for r in range(args.repeats):
                quiet = heartbeats(port, args.seconds, seq)
                seq += len(quiet)
                q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
                stop = time.monotonic() + args.seconds + 0.5
                procs = [mp.Process(target=flood, args=(port, body, stop, q))
                         for _ in range(args.clients)]
                for p in procs:
                    p.start()
                cpu0 = cpu_s(proc.pid)
                time.sleep(0.5)
                loaded = heartbeats(port, args.seconds, seq)
                seq += len(loaded)
                for _ in procs:
                    for status, n in q.get(timeout=300).items():
                        answers[status] = answers.get(status, 0) + n
                for p in procs:
                    p.join()
                cpu_loaded += cpu_s(proc.pid) - cpu0
                row = (1000 * statistics.median(quiet), 1000 * pct(quiet, 99),
                       1000 * statistics.median(loaded), 1000 * pct(loaded, 99))
                rows.append(row)
                print(f"{r + 1:>6} {row[0]:>8.1f}/{row[1]:<9.1f} {row[2]:>9.1f}/{row[3]:<9.1f} "
                      f"{row[2] / row[0]:>7.1f} {row[3] / row[1]:>7.1f}", flush=True)
            print(f"mean [95% interval] over {args.repeats} repeats: quiet p50 "
                  f"{mean_ci([x[0] for x in rows])} ms, p99 {mean_ci([x[1] for x in rows])} ms; "
                  f"loaded p50 {mean_ci([x[2] for x in rows])} ms, "
                  f"p99 {mean_ci([x[3] for x in rows])} ms; ratio p50 "
                  f"{mean_ci([x[2] / x[0] for x in rows])}, p99 "
                  f"{mean_ci([x[3] / x[1] for x in rows])}")
            calls = sum(answers.values())
            print("extender answers by status (0: connection error): "
                  + ", ".join(f"{k}: {v}" for k, v in sorted(answers.items()))
                  + f"; the manager's CPU in the loaded phases: {cpu_loaded:.1f} s, "
                  f"{1000 * cpu_loaded / max(1, calls):.1f} ms a call (heartbeats included)")
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
