"""Helpers for the manager's tests: the app served by a real uvicorn on a loopback port, and
heartbeat builders."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from planelib import free_port


@contextmanager
def serve(app: Any, port: int | None = None) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 in a thread; yields its base URL."""
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


TOKENS = {f"token-for-node-{i:04d}-xxxxxxxx": f"node-{i}" for i in range(200)}


def token(node: str) -> str:
    for tok, n in TOKENS.items():
        if n == node:
            return tok
    raise KeyError(node)


def auth(node: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(node)}"}


def job(pod: str, category: str, namespace: str = "default", **extra: Any) -> dict[str, Any]:
    return {"namespace": namespace, "pod": pod, "category": category, **extra}


def heartbeat(node: str, jobs: list[dict[str, Any]] | None = None, seq: int = 1,
              load: float = 0.0, cpus: float = 4.0, **extra: Any) -> dict[str, Any]:
    return {"node": node, "time": time.time(), "seq": seq, "capacity_cpus": cpus,
            "load_cores": load, "jobs": jobs or [], **extra}
