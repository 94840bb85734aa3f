"""Serving an ASGI app (the manager) with a real uvicorn on a loopback port, for any test folder."""

from __future__ import annotations

import signal
import subprocess
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


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, 15 s to end cleanly, then SIGKILL: how a test ends a program it started."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
