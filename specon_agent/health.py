"""The agent's liveness: ``/healthz`` beside ``/metrics`` on the metrics port.

The control loop marks every pass it completes (:meth:`LoopWatchdog.beat`); ``/healthz``
answers 200 ``ok`` while the last one is within the bound, and 503 with the reason once the
loop has not completed a pass for longer (a step that never returns: a hung read, a lock). The
chart's livenessProbe asks it, so the kubelet restarts a stalled agent. The loop also stops
producing heartbeats then, and the manager link sends only heartbeats it has not delivered yet
(specon_agent/link.py), so the manager sees the node go stale instead of a stalled agent's last
state repeated.
"""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

#: The bound is never below this (seconds), whatever the poll interval.
MIN_STALL_S = 30.0


def stall_bound(poll_s: float, configured: float | None = None) -> float:
    """How long the loop may go without completing a pass: ``configured``, else three poll
    intervals, at least :data:`MIN_STALL_S`."""
    return configured if configured is not None else max(MIN_STALL_S, 3.0 * poll_s)


class LoopWatchdog:
    """When the control loop last completed a pass, and whether that is recent enough."""

    def __init__(self, bound_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.bound_s = bound_s
        self._clock = clock
        self._last = clock()

    def beat(self) -> None:
        self._last = self._clock()

    def check(self) -> tuple[bool, str]:
        """(alive, the reason when not)."""
        idle = self._clock() - self._last
        if idle > self.bound_s:
            return False, (f"control loop stalled: no pass completed for {idle:.1f} s "
                           f"(bound {self.bound_s:g} s)")
        return True, "ok"


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape every few seconds would drown the agent's log


def app(registry: CollectorRegistry, watchdog: LoopWatchdog) -> Callable[..., Iterable[bytes]]:
    """The WSGI app: ``/healthz`` from the watchdog, anything else Prometheus's exposition."""
    metrics = make_wsgi_app(registry)

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz":
            alive, reason = watchdog.check()
            body = (reason + "\n").encode()
            start_response("200 OK" if alive else "503 Service Unavailable",
                           [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body)))])
            return [body]
        return metrics(environ, start_response)  # type: ignore[no-any-return]

    return serve


def serve(registry: CollectorRegistry, watchdog: LoopWatchdog, port: int,
          address: str = "0.0.0.0") -> WSGIServer:
    """Serve ``/metrics`` and ``/healthz`` on ``address:port`` from a daemon thread; the server
    (``server_port`` is the port when 0 was asked, ``shutdown()`` stops it)."""
    server_class = _Server6 if ":" in address else _Server
    server = make_server(address, port, app(registry, watchdog), server_class, _QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
