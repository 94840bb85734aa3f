"""The agent's link to the manager: heartbeats and reallocation requests over HTTP (httpx),
sent from a thread of its own so that a manager that is away, failing or hanging never holds up
the control loop. Failures back off exponentially (with jitter); FlowCon keeps working locally
meanwhile, and the next heartbeat after the manager returns carries the current state.
"""

from __future__ import annotations

import collections
import logging
import random
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from specon.wire import (
    Heartbeat,
    HeartbeatReply,
    ReallocationReply,
    ReallocationRequest,
)

log = logging.getLogger(__name__)


class ManagerLink:
    """Sends the latest heartbeat every ``interval_s`` and each reallocation request at once.

    ``on_reply(HeartbeatReply)`` and ``on_reallocation(request, ReallocationReply)`` are called
    from the link's thread; ``on_outcome(kind, outcome)`` counts every attempt.
    """

    def __init__(
        self,
        url: str,
        token_file: Path | None,
        interval_s: float = 10.0,
        timeout_s: float = 5.0,
        backoff_max_s: float = 60.0,
        on_reply: Callable[[HeartbeatReply], None] | None = None,
        on_reallocation: Callable[[ReallocationRequest, ReallocationReply], None] | None = None,
        on_outcome: Callable[[str, str], None] | None = None,
        transport: httpx.BaseTransport | None = None,
        ca_file: Path | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.token_file = token_file
        self.interval_s = interval_s
        self.backoff_max_s = backoff_max_s
        # An https URL is verified against ca_file (the chart's CA) or the system's CAs.
        verify: ssl.SSLContext | bool = (ssl.create_default_context(cafile=str(ca_file))
                                         if ca_file is not None else True)
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s, transport=transport,
                                  verify=verify)
        self._on_reply = on_reply or (lambda _r: None)
        self._on_realloc = on_reallocation or (lambda _q, _r: None)
        self._on_outcome = on_outcome or (lambda _k, _o: None)
        self._lock = threading.Condition()
        self._heartbeat: Heartbeat | None = None
        self._requests: collections.deque[ReallocationRequest] = collections.deque(maxlen=256)
        self._stop = False
        self._thread: threading.Thread | None = None
        self.failures = 0  # consecutive
        self.last_success: float | None = None

    # -- called by the control loop -----------------------------------------------------------
    def offer_heartbeat(self, hb: Heartbeat) -> None:
        """The newest state to report; an older one not yet sent is replaced, not queued."""
        with self._lock:
            self._heartbeat = hb

    def request_reallocation(self, req: ReallocationRequest) -> None:
        with self._lock:
            if all(r.pod != req.pod or r.namespace != req.namespace for r in self._requests):
                self._requests.append(req)
            self._lock.notify()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="manager-link", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stop = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join(timeout=(self._http.timeout.read or 5.0) + 1.0)
        self._http.close()

    # -- the thread ---------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        if self.token_file is None:
            return {}
        # Read each time: projected service-account tokens are rotated on disk.
        token = self.token_file.read_text().strip()
        return {"Authorization": f"Bearer {token}"}

    def _post(self, kind: str, path: str, body: str) -> httpx.Response | None:
        try:
            r = self._http.post(path, content=body, headers={
                "Content-Type": "application/json", **self._headers()})
        except httpx.TimeoutException:
            outcome = "timeout"
        except httpx.TransportError:
            outcome = "unreachable"
        except OSError:
            outcome = "no_token"
        else:
            if r.status_code < 300:
                self._on_outcome(kind, "ok")
                return r
            outcome = f"http_{r.status_code // 100}xx"
            log.warning("manager answered %s to %s: %s", r.status_code, path, r.text[:200])
        self._on_outcome(kind, outcome)
        return None

    def _wait(self) -> float:
        if self.failures == 0:
            return self.interval_s
        backoff = min(self.backoff_max_s, self.interval_s * 2.0 ** min(self.failures - 1, 16))
        return backoff * random.uniform(0.8, 1.0)

    def _loop(self) -> None:
        next_hb = 0.0
        while True:
            with self._lock:
                while not self._stop and not self._requests and time.monotonic() < next_hb:
                    self._lock.wait(max(0.0, next_hb - time.monotonic()))
                if self._stop:
                    return
                req = self._requests.popleft() if self._requests else None
                hb = self._heartbeat if req is None else None
            if req is not None:
                self._send_request(req)
                continue
            if hb is not None:
                ok = self._send_heartbeat(hb)
                self.failures = 0 if ok else self.failures + 1
                if ok:
                    self.last_success = time.time()
                elif self.failures in (1, 5) or self.failures % 20 == 0:
                    log.warning("manager away (%d heartbeats failed); FlowCon continues locally",
                                self.failures)
            next_hb = time.monotonic() + self._wait()

    def _send_heartbeat(self, hb: Heartbeat) -> bool:
        r = self._post("heartbeat", "/v1/heartbeat", hb.model_dump_json())
        if r is None:
            return False
        try:
            reply = HeartbeatReply.model_validate_json(r.content)
        except ValueError as exc:
            log.warning("manager's heartbeat reply is not understood: %s", exc)
            self._on_outcome("heartbeat", "bad_reply")
            return False
        self._on_reply(reply)
        return True

    def _send_request(self, req: ReallocationRequest) -> None:
        r = self._post("reallocation", "/v1/reallocate", req.model_dump_json())
        if r is None:
            return  # Algorithm 3 raises it again at the next interval while it still holds
        try:
            reply = ReallocationReply.model_validate_json(r.content)
        except ValueError as exc:
            log.warning("manager's reallocation reply is not understood: %s", exc)
            return
        log.info("reallocation of %s/%s: %s %s", req.namespace, req.pod, reply.decision,
                 reply.target or reply.reason)
        self._on_realloc(req, reply)
