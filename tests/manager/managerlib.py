"""Helpers for the manager's tests: the app served by a real uvicorn on a loopback port, and
heartbeat builders."""

from __future__ import annotations

import time
from typing import Any

from servelib import serve as serve

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


class Clock:
    """Injected time, so that staleness is tested without waiting."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Standby:
    """The migration controller of a replica that does not hold the Lease (what the API asks
    of it; the real one is exercised by the plane tests and the fault campaign)."""

    leader = False

    def ready(self) -> bool:
        return self.leader

    def reallocate(self, node: str, req: Any) -> Any:
        raise AssertionError("not asked")
