"""The manager at cluster scale: extender latency, heartbeats per second, memory and CPU, and a
flood of maximum-size extender bodies against a normal heartbeat's latency.

Usage: python benchmarks/manager_scale.py [--nodes 500 5000] [--jobs 100] [--calls 300]
       [--repeats 3] [--heartbeat-seconds 5] [--clients 2] [--connections 16]
       [--flood-seconds 10] [--manager-cpu 0] [--heartbeats request stream]

Starts the real manager (``python -m specon_manager``, no Kubernetes) on a loopback port, pinned
to one CPU (``--manager-cpu``; the clients run on the others), with a token per node. Then:

1. registers ``max(--nodes)`` nodes by heartbeat, each reporting ``--jobs`` jobs, and reads the
   manager's RSS (the state for that many nodes x jobs);
2. times kube-scheduler's calls from this process over HTTP (one keep-alive connection, as the
   scheduler's; a raw socket, so that the client's own parsing stays out of the figure),
   filter and prioritize with NodeNames (``nodeCacheCapable: true``) for each ``--nodes``:
   p50 and p99 over ``--calls`` calls, ``--repeats`` times (the spread is the range of the
   repeats);
3. idle: the manager's CPU over 5 s with no traffic;
4. heartbeats: ``--clients`` processes each open ``--connections`` keep-alive connections and,
   from one start time, send distinct valid, authenticated heartbeats (3 jobs, increasing seq
   per node) for ``--heartbeat-seconds``: ``request`` — one request per heartbeat
   (``POST /v1/heartbeat``), 8 pipelined per connection, each connection for its own nodes;
   ``stream`` — each connection one node's stream (``POST /v1/heartbeats``), 8 heartbeats a
   chunk. Accepted per second (``"accepted":true``), the manager's own accepted counter
   against the clients' count (none lost), the manager's CPU seconds and accepted heartbeats
   per CPU-second (what one core of its own would take), the clients' CPU, the manager's
   RSS; ``--repeats`` times each;
5. streams: ``max(--nodes)`` heartbeat streams, one per node, held open at once (one
   heartbeat each), and the manager's RSS before and after;
6. flood: three clients send extender bodies just under the manager's limit
   (``max_extender_body_bytes``) back to back while one agent sends a heartbeat every 50 ms;
   the heartbeat's p50/p99 with and without the flood.

Everything stays on loopback. Numbers depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
POD = {"metadata": {"name": "train-1", "namespace": "default", "uid": "u-1",
                    "labels": {"specon.io/training": "true"}},
       "spec": {"schedulerName": "specon", "containers": [{"name": "main", "image": "x"}]}}
CATS = ("PC", "WC", "CC")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def token(i: int) -> str:
    return f"benchmark-token-{i:08d}"


def hb_body(i: int, seq: int, jobs: int) -> bytes:
    node = f"node-{i}"
    return json.dumps({"node": node, "time": time.time(), "seq": seq, "capacity_cpus": 16,
                       "load_cores": float(i % 13), "jobs": [
                           {"namespace": "default", "pod": f"{node}-{k}", "uid": f"uid-{i}-{k}",
                            "category": CATS[(i + k) % 3]} for k in range(jobs)]},
                      separators=(",", ":")).encode()


def wait_healthy(port: int, tries: int = 300) -> None:
    """Until the manager on ``port`` answers ``/healthz`` 200 (at most ``tries`` tries)."""
    for _ in range(tries):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)


def request(path: str, body: bytes, auth: str | None = None) -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nhost: m\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n")
    if auth:
        head += f"authorization: Bearer {auth}\r\n"
    return head.encode() + b"\r\n" + body


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


class Proc:
    """The manager's RSS and CPU seconds from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metric(port: int, name: str) -> float:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name))


class RawClient:
    """One keep-alive HTTP/1.1 connection that sends prebuilt requests and reads each answer
    into one buffer: the client's own cost stays out of the latency (a Python HTTP client
    parsing a 150 KB answer costs more than the manager does to write it)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(8 << 20)

    def call(self, req: bytes) -> tuple[int, bytes]:
        """Send ``req``; the status and the body."""
        self.sock.sendall(req)
        view = memoryview(self.buf)
        got = 0
        end = -1
        while end < 0:
            got += self.sock.recv_into(view[got:])
            end = self.buf.find(b"\r\n\r\n", 0, got)
        head = bytes(self.buf[:end]).lower()
        i = head.index(b"content-length:") + 15
        j = head.find(b"\r\n", i)
        length = int(head[i:j if j >= 0 else None])
        total = end + 4 + length
        while got < total:
            got += self.sock.recv_into(view[got:])
        return int(head[9:12]), bytes(self.buf[end + 4:total])

    def close(self) -> None:
        self.sock.close()


# -- heartbeat load (in client processes) ---------------------------------------------------------
def hb_template(i: int, jobs: int) -> tuple[str, str]:
    """Node i's heartbeat as a ``%`` template of (time, seq), and its request head (a ``%``
    template of the length): formatting it costs the client far less than encoding JSON."""
    body = hb_body(i, 0, jobs).decode()
    head = request("/v1/heartbeat", b"", token(i)).decode().replace(
        "content-length: 0", "content-length: %d")
    t0 = body.index('"time":') + 7
    body = body[:t0] + "%.3f" + body[body.index(",", t0):]
    return body.replace('"seq":0', '"seq":%d'), head


async def _hb_connection(port: int, nodes: list[int], stop: float, out: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    seq = 1
    depth = 8
    templates = {i: hb_template(i, 3) for i in nodes}
    try:
        while time.time() < stop:
            seq += 1
            batch = [nodes[(seq * depth + k) % len(nodes)] for k in range(depth)]
            now = time.time()
            parts = []
            for i in batch:
                body, head = templates[i]
                raw = (body % (now, seq)).encode()
                parts.append((head % len(raw)).encode() + raw)
            writer.write(b"".join(parts))
            await writer.drain()
            buf = b""
            pos = done = 0
            while done < depth:  # the answers, parsed in place as they arrive
                buf += await reader.read(1 << 16)
                while done < depth:
                    end = buf.find(b"\r\n\r\n", pos)
                    if end < 0:
                        break
                    i = buf.find(b"content-length:", pos, end) + 15
                    length = int(buf[i:buf.find(b"\r\n", i, end + 2)])
                    if len(buf) < end + 4 + length:
                        break
                    ok = buf.startswith(b"HTTP/1.1 200", pos) and buf.find(
                        b'"accepted":true', end, end + 4 + length) >= 0
                    out[0 if ok else 1] += 1
                    pos = end + 4 + length
                    done += 1
    finally:
        writer.close()


async def _hb_stream(port: int, node: int, stop: float, out: list[int], depth: int = 8) -> None:
    """One agent's heartbeat stream (POST /v1/heartbeats), ``depth`` heartbeats a chunk."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST /v1/heartbeats HTTP/1.1\r\nhost: m\r\ntransfer-encoding: chunked\r\n"
                 f"content-type: application/x-ndjson\r\nauthorization: Bearer {token(node)}"
                 "\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    body, _ = hb_template(node, 3)
    seq = 1
    buf = b""
    try:
        while time.time() < stop:
            now = time.time()
            data = b"".join((body % (now, seq + k)).encode() + b"\n" for k in range(depth))
            seq += depth
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            done = 0
            while done < depth:  # answer lines end with "}\n" (chunk framing adds "\r\n")
                buf += await reader.read(1 << 16)
                end = buf.rfind(b"}\n") + 2
                if end < 2:
                    continue
                part, buf = buf[:end], buf[end:]
                n, ok = part.count(b"}\n"), part.count(b'"accepted":true')
                out[0] += ok
                out[1] += n - ok
                done += n
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    finally:
        writer.close()


def _hb_client(port: int, nodes: list[int], connections: int, start: float, stop: float,
               cpu: int | None, stream: bool, q: Any) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    out = [0, 0]
    per = max(1, len(nodes) // connections)

    async def main() -> None:
        await asyncio.sleep(max(0.0, start - time.time()))
        if stream:  # a stream per node (one agent each), on ``connections`` of them
            await asyncio.gather(*(_hb_stream(port, nodes[k * per], stop, out)
                                   for k in range(connections)))
            return
        # each connection owns its own nodes, so a node's seq only grows
        await asyncio.gather(*(_hb_connection(port, nodes[k * per:(k + 1) * per] or nodes,
                                              stop, out) for k in range(connections)))

    asyncio.run(main())
    q.put([*out, time.process_time()])


def heartbeat_load(port: int, n_nodes: int, clients: int, connections: int, seconds: float,
                   client_cpus: list[int | None], stream: bool,
                   ) -> tuple[int, int, float, float]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    start = time.time() + 2.0  # the processes start meanwhile; they all begin then
    stop = start + seconds
    share = n_nodes // clients
    procs = [ctx.Process(target=_hb_client, args=(
        port, list(range(k * share, (k + 1) * share)), connections, start, stop,
        client_cpus[k % len(client_cpus)], stream, q)) for k in range(clients)]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    return (sum(r[0] for r in results), sum(r[1] for r in results), seconds,
            sum(r[2] for r in results))


async def _open_streams(port: int, n: int, rss: Any) -> str:
    """One stream per node, each with one heartbeat answered, all held open at once."""
    before = rss()
    conns = []
    ok = 0
    try:
        for i in range(n):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            conns.append((reader, writer))
            body, _ = hb_template(i, 3)
            line = (body % (time.time(), 10**9)).encode() + b"\n"
            writer.write(f"POST /v1/heartbeats HTTP/1.1\r\nhost: m\r\ntransfer-encoding: "
                         f"chunked\r\nauthorization: Bearer {token(i)}\r\n\r\n".encode()
                         + b"%x\r\n%s\r\n" % (len(line), line))
        for reader, _ in conns:
            await reader.readuntil(b"\r\n\r\n")
            ok += b'"accepted":true' in await reader.readuntil(b"}\n")
        await asyncio.sleep(1.0)
        held = metric(port, "specon_manager_heartbeat_streams")
        return (f"streams: {n} open at once ({held:.0f} by the manager's gauge), {ok} "
                f"heartbeats accepted on them; manager RSS {before:.0f} -> {rss():.0f} MiB")
    finally:
        for _, writer in conns:
            writer.close()


# -- flood ------------------------------------------------------------------------------------
def flood_body(limit: int, names: list[str]) -> bytes:
    """A full-Nodes ExtenderArgs just under ``limit`` bytes."""
    pad = "x" * 4000
    items = []
    size = 200
    i = 0
    while True:
        item = {"metadata": {"name": names[i % len(names)], "annotations": {"pad": pad}}}
        size += len(json.dumps(item)) + 1
        if size > limit - 8192:
            break
        items.append(item)
        i += 1
    return json.dumps({"Pod": POD, "Nodes": {"items": items}}).encode()


def heartbeat_latency(port: int, seconds: float) -> list[float]:
    times: list[float] = []
    stop = time.monotonic() + seconds
    seq = 10**9  # above the load phase's
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while time.monotonic() < stop:
        seq += 1
        body = hb_body(0, seq, 3)
        t0 = time.perf_counter()
        c.request("POST", "/v1/heartbeat", body=body, headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {token(0)}"})
        r = c.getresponse()
        r.read()
        times.append(time.perf_counter() - t0)
        assert r.status == 200, r.status
        time.sleep(0.05)
    c.close()
    return times


def flood(port: int, body: bytes, stop: float, counts: list[int]) -> None:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    while time.monotonic() < stop:
        c.request("POST", "/prioritize", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        counts[0 if r.status == 200 else 1] += 1
    c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[500, 5000])
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--heartbeat-seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--flood-seconds", type=float, default=10.0)
    ap.add_argument("--manager-cpu", type=int, default=0)
    ap.add_argument("--heartbeats", nargs="+", default=["request", "stream"],
                    choices=["request", "stream"])
    ap.add_argument("--skip", nargs="*", default=[],
                    choices=["extender", "heartbeats", "streams", "flood"])
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    mcpu = args.manager_cpu if args.manager_cpu in cpus else None
    client_cpus: list[int | None] = [c for c in cpus if c != mcpu] or [None]
    if client_cpus != [None]:
        os.sched_setaffinity(0, set(c for c in client_cpus if c is not None))
    n_max = max(args.nodes)
    with tempfile.TemporaryDirectory() as tmp:
        tok = Path(tmp) / "tokens"
        tok.write_text("".join(f"{token(i)} node-{i}\n" for i in range(n_max)))
        port = free_port()
        env = {**os.environ, "SPECON_MANAGER_KUBERNETES": "false",
               "SPECON_MANAGER_HOST": "127.0.0.1", "SPECON_MANAGER_PORT": str(port),
               "SPECON_MANAGER_TOKENS_FILE": str(tok), "SPECON_MANAGER_LOG_LEVEL": "warning",
               "SPECON_MANAGER_HEARTBEAT_INTERVAL_S": "3600"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "specon_manager"], env=env, cwd=REPO,
            preexec_fn=(lambda: os.sched_setaffinity(0, {mcpu})) if mcpu is not None else None)
        mp_ = Proc(proc.pid)
        print(f"manager pid {proc.pid} on CPU {mcpu}, clients on {client_cpus}; "
              f"{os.cpu_count()} CPUs")
        try:
            wait_healthy(port)
            rss0 = mp_.rss_mib()
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            for i in range(n_max):
                c.request("POST", "/v1/heartbeat", body=hb_body(i, 1, args.jobs), headers={
                    "Content-Type": "application/json", "Authorization": f"Bearer {token(i)}"})
                r = c.getresponse()
                r.read()
                assert r.status == 200, (r.status, i)
            print(f"RSS: {rss0:.0f} MiB empty, {mp_.rss_mib():.0f} MiB with {n_max} nodes x "
                  f"{args.jobs} jobs")
            if "extender" not in args.skip:
                print(f"{'nodes':>6} {'call':<11} {'p50 ms':>16} {'p99 ms':>16} "
                      f"{'CPU ms/call':>16}  (median [min-max] of {args.repeats} x {args.calls} "
                      "calls; CPU: the manager's)")
                rc = RawClient(port)
                for n in args.nodes:
                    raw = json.dumps({"Pod": POD, "NodeNames": [f"node-{i}" for i in range(n)]},
                                     separators=(",", ":")).encode()
                    for verb in ("filter", "prioritize"):
                        req = request(f"/{verb}", raw)
                        status, out = rc.call(req)
                        assert status == 200 and len(json.loads(out)["NodeNames"] if
                                                     verb == "filter" else json.loads(out)) == n
                        p50s, p99s, cpus = [], [], []
                        for _ in range(args.repeats):
                            times = []
                            cpu0 = mp_.cpu_s()
                            for _ in range(args.calls):
                                t0 = time.perf_counter()
                                status, _ = rc.call(req)
                                times.append(time.perf_counter() - t0)
                                assert status == 200
                            cpus.append(1000 * (mp_.cpu_s() - cpu0) / args.calls)
                            p50s.append(1000 * statistics.median(times))
                            p99s.append(1000 * pct(times, 99))
                        f = lambda xs: (f"{statistics.median(xs):.2f} "  # noqa: E731
                                        f"[{min(xs):.2f}-{max(xs):.2f}]")
                        print(f"{n:>6} {verb:<11} {f(p50s):>16} {f(p99s):>16} {f(cpus):>16}",
                              flush=True)
                rc.close()
            c.close()
            cpu0 = mp_.cpu_s()
            time.sleep(5)
            print(f"idle: {100 * (mp_.cpu_s() - cpu0) / 5:.1f}% of a core, RSS "
                  f"{mp_.rss_mib():.0f} MiB")
            for mode in ("request", "stream"):
                if "heartbeats" in args.skip or mode not in args.heartbeats:
                    continue
                for _ in range(args.repeats):
                    before = metric(port, 'specon_manager_heartbeats_total{result="accepted"}')
                    cpu0, t0 = mp_.cpu_s(), time.monotonic()
                    ok, bad, secs, client_cpu = heartbeat_load(
                        port, n_max, args.clients, args.connections, args.heartbeat_seconds,
                        client_cpus, mode == "stream")
                    wall = time.monotonic() - t0
                    cpu = mp_.cpu_s() - cpu0
                    counted = metric(
                        port, 'specon_manager_heartbeats_total{result="accepted"}') - before
                    print(f"heartbeats ({mode}): {ok / secs:.0f}/s accepted ({ok} in {secs:.0f} s, "
                          f"{bad} not accepted; manager counted {counted:.0f}); manager CPU "
                          f"{cpu:.1f} s ({ok / cpu:.0f} accepted per CPU-second), clients' "
                          f"CPU {client_cpu:.1f} s in {wall:.1f} s; RSS {mp_.rss_mib():.0f} MiB",
                          flush=True)
            if "streams" not in args.skip:
                print(asyncio.run(_open_streams(port, n_max, mp_.rss_mib)), flush=True)
            if "flood" not in args.skip:
                limit = int(os.environ.get("SPECON_MANAGER_MAX_EXTENDER_BODY_BYTES",
                                           4 * 1024 * 1024))
                body = flood_body(limit, [f"node-{i}" for i in range(n_max)])
                quiet = heartbeat_latency(port, args.flood_seconds / 2)
                counts = [0, 0]
                stop = time.monotonic() + args.flood_seconds
                floods = [threading.Thread(target=flood, args=(port, body, stop, counts))
                          for _ in range(3)]
                peak = [0.0]

                def sample() -> None:
                    while time.monotonic() < stop:
                        peak[0] = max(peak[0], mp_.rss_mib())
                        time.sleep(0.05)

                floods.append(threading.Thread(target=sample))
                for t in floods:
                    t.start()
                time.sleep(0.5)
                loud = heartbeat_latency(port, args.flood_seconds - 1)
                for t in floods:
                    t.join()
                rss_peak = peak[0]
                ms = lambda xs, p: 1000 * pct(xs, p)  # noqa: E731
                print(f"flood: heartbeat p50/p99 {ms(quiet, 50):.1f}/{ms(quiet, 99):.1f} ms "
                      f"quiet, {ms(loud, 50):.1f}/{ms(loud, 99):.1f} ms while 3 clients sent "
                      f"{len(body) / 2**20:.1f} MiB bodies ({counts[0]} answered, {counts[1]} "
                      f"refused; manager RSS peak {rss_peak:.0f} MiB)")
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
