"""Per-heartbeat cost of the manager's ASGI app, without the network: the plain ASGI route
(``HotRoutes``, what the manager serves), the same handler behind FastAPI's routing,
dependency and response machinery, the heartbeat stream (``POST /v1/heartbeats``: one
request per node carrying its heartbeats, 8 a chunk), and the cost of the validation alone.

Usage: python benchmarks/heartbeat_path.py [--jobs 3 100] [--calls 20000] [--repeats 5]

Each call is one complete ASGI request (scope, body, response start and body) of a distinct,
valid, authenticated heartbeat; the figure is the best of ``--repeats`` runs, in µs per
heartbeat, and what that allows on one core. uvicorn's own HTTP parsing comes on top
(``benchmarks/manager_scale.py`` measures the whole server).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from specon.wire import Heartbeat
from specon_manager.app import create_app
from specon_manager.auth import NodeTokens
from specon_manager.settings import ManagerSettings

NODES = 1000


def body(i: int, seq: int, jobs: int) -> bytes:
    node = f"node-{i}"
    return json.dumps({"node": node, "time": time.time(), "seq": seq, "capacity_cpus": 16,
                       "load_cores": 2.0, "jobs": [
                           {"namespace": "default", "pod": f"{node}-{k}", "uid": f"u-{i}-{k}",
                            "category": ("PC", "WC", "CC")[k % 3]} for k in range(jobs)]}
                      ).encode()


class Receive:
    """The request body once, then a disconnect."""

    def __init__(self, raw: bytes) -> None:
        self.msgs: list[Any] = [{"type": "http.request", "body": raw, "more_body": False}]

    async def __call__(self) -> Any:
        return self.msgs.pop() if self.msgs else {"type": "http.disconnect"}


async def run(app: Any, reqs: list[tuple[bytes, bytes]]) -> float:
    sent: list[Any] = []

    async def send(msg: Any) -> None:
        sent.append(msg)

    t0 = time.perf_counter()
    for auth, raw in reqs:
        scope = {"type": "http", "method": "POST", "path": "/v1/heartbeat", "raw_path":
                 b"/v1/heartbeat", "root_path": "", "scheme": "http", "query_string": b"",
                 "http_version": "1.1", "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1),
                 "headers": [(b"content-type", b"application/json"),
                             (b"content-length", str(len(raw)).encode()),
                             (b"authorization", auth)]}
        await app(scope, Receive(raw), send)
    elapsed = time.perf_counter() - t0
    assert all(m["status"] == 200 for m in sent if m["type"] == "http.response.start")
    return elapsed


async def run_streams(app: Any, auths: dict[str, bytes], bodies: dict[str, list[bytes]]
                      ) -> float:
    """One stream per node, each carrying that node's heartbeats, 8 lines a chunk."""
    sent: list[Any] = []

    async def send(msg: Any) -> None:
        sent.append(msg)

    t0 = time.perf_counter()
    for node, raws in bodies.items():
        chunks = [b"".join(r + b"\n" for r in raws[k:k + 8]) for k in range(0, len(raws), 8)]
        msgs: list[Any] = [{"type": "http.request", "body": c, "more_body": True}
                           for c in chunks] + [{"type": "http.request", "body": b"",
                                                "more_body": False}]
        msgs.reverse()

        async def receive(msgs: list[Any] = msgs) -> Any:
            return msgs.pop()

        scope = {"type": "http", "method": "POST", "path": "/v1/heartbeats", "raw_path":
                 b"/v1/heartbeats", "root_path": "", "scheme": "http", "query_string": b"",
                 "http_version": "1.1", "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1),
                 "headers": [(b"transfer-encoding", b"chunked"), (b"authorization", auths[node])]}
        await app(scope, receive, send)
    elapsed = time.perf_counter() - t0
    lines = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert lines.count(b'"accepted":true') == sum(map(len, bodies.values())), lines[:300]
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, nargs="+", default=[3, 100])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    tokens = {f"benchmark-token-{i:08d}": f"node-{i}" for i in range(NODES)}
    auths = {n: f"Bearer {t}".encode() for t, n in tokens.items()}
    print(f"{'jobs':>5} {'path':<28} {'µs/heartbeat':>13} {'per core/s':>11}")
    for jobs in args.jobs:
        calls = args.calls if jobs < 20 else max(1000, args.calls // 10)
        seq = 0
        for label, hot in (("plain ASGI route (served)", True), ("FastAPI route", False)):
            app = create_app(ManagerSettings(kubernetes=False), tokens=NodeTokens(tokens),
                             hot_routes=hot)
            best = float("inf")
            for _ in range(args.repeats):
                seq += 1
                reqs = [(auths[f"node-{i % NODES}"], body(i % NODES, seq * calls + i, jobs))
                        for i in range(calls)]
                best = min(best, asyncio.run(run(app, reqs)) / calls)
            print(f"{jobs:>5} {label:<28} {best * 1e6:>13.1f} {1 / best:>11.0f}", flush=True)
        app = create_app(ManagerSettings(kubernetes=False), tokens=NodeTokens(tokens))
        best = float("inf")
        for _ in range(args.repeats):
            seq += 1
            streams: dict[str, list[bytes]] = {}
            for i in range(calls):
                streams.setdefault(f"node-{i % NODES}", []).append(
                    body(i % NODES, seq * calls + i, jobs))
            best = min(best, asyncio.run(run_streams(app, auths, streams)) / calls)
        print(f"{jobs:>5} {'stream (8 a chunk)':<28} {best * 1e6:>13.1f} {1 / best:>11.0f}",
              flush=True)
        raws = [body(i % NODES, i, jobs) for i in range(calls)]
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for raw in raws:
                Heartbeat.model_validate_json(raw)
            best = min(best, (time.perf_counter() - t0) / calls)
        print(f"{jobs:>5} {'validation alone':<28} {best * 1e6:>13.1f} {1 / best:>11.0f}",
              flush=True)


if __name__ == "__main__":
    main()
