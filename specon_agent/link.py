"""The agent's link to the manager: heartbeats and reallocation requests over HTTP (httpx),
sent from a thread of its own so that a manager that is away, failing or hanging never holds up
the control loop. Failures back off exponentially (with jitter); FlowCon keeps working locally
meanwhile, and the next heartbeat after the manager returns carries the current state.

Heartbeats go on one long-lived request, ``POST /v1/heartbeats`` (:class:`HeartbeatStream`),
where the manager offers it; a manager without it (404, or one that waits for the end of the
body) gets them one request each on ``POST /v1/heartbeat``, and the stream is tried again
after ``STREAM_RETRY_S``.

A heartbeat is stamped with the wall clock when it is sent (a retry is stamped again), and one
the manager has taken is never sent again: only a newer one the loop offers is, so a loop that
stalls shows as a node gone stale, never as a fresh node whose report is frozen (issue 32).
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import json
import logging
import random
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from specon.wire import (
    Heartbeat,
    HeartbeatReply,
    ReallocationReply,
    ReallocationRequest,
)

log = logging.getLogger(__name__)

STREAM_PATH = "/v1/heartbeats"
#: After a manager without the stream, heartbeats go one request each for this long.
STREAM_RETRY_S = 600.0
#: The longest reply line read from the stream.
MAX_REPLY_BYTES = 1 << 20


class NoStream(Exception):
    """The manager does not offer the heartbeat stream."""


class HeartbeatStream:
    """One long-lived ``POST /v1/heartbeats``: each heartbeat is a line (JSON) of the request's
    chunked body, its answer a line of the response's, ``{"status": 200, "reply": ...}`` or
    ``{"status": 4xx, "detail": ...}``. http.client, because httpx sends a request's whole
    body before it reads the answer. Opening raises :class:`NoStream` when the manager answers
    that it has no such path, or does not answer the start in ``timeout_s``; an answered
    refusal (401, 503, ...) is :attr:`refused` (status, text)."""

    def __init__(self, url: str, token: str | None, context: ssl.SSLContext | None,
                 timeout_s: float) -> None:
        u = urlsplit(url)
        host, port = u.hostname or "localhost", u.port
        self.token = token
        self.conn: http.client.HTTPConnection = (
            http.client.HTTPSConnection(host, port, timeout=timeout_s, context=context)
            if u.scheme == "https" else http.client.HTTPConnection(host, port, timeout=timeout_s))
        self.refused: tuple[int, str] | None = None
        try:
            self.conn.putrequest("POST", u.path.rstrip("/") + STREAM_PATH,
                                 skip_accept_encoding=True)
            self.conn.putheader("Content-Type", "application/x-ndjson")
            self.conn.putheader("Transfer-Encoding", "chunked")
            if token:
                self.conn.putheader("Authorization", f"Bearer {token}")
            self.conn.endheaders()
            try:
                self.response = self.conn.getresponse()
            except TimeoutError:
                raise NoStream("the manager did not answer the stream's start") from None
            status = self.response.status
            kind = self.response.getheader("content-type", "")
            if status in (404, 405) or (status == 200 and "ndjson" not in kind):
                raise NoStream(f"the manager answered {status} ({kind}) to {STREAM_PATH}")
            if status != 200:
                self.refused = (status, self.response.read(4096).decode("utf-8", "replace"))
        except BaseException:
            self.conn.close()
            raise

    def send(self, line: bytes) -> tuple[int, bytes]:
        """Send one heartbeat (JSON, no newline); the status and the reply (or the refusal)
        as JSON. ConnectionError when the manager ended the stream."""
        data = line + b"\n"
        self.conn.send(b"%x\r\n%s\r\n" % (len(data), data))
        got = self.response.readline(MAX_REPLY_BYTES)
        if not got.endswith(b"\n"):
            raise ConnectionError("the manager ended the heartbeat stream")
        answer = json.loads(got)
        status = int(answer.get("status", 0))
        body = answer.get("reply") if status == 200 else {"detail": answer.get("detail")}
        return status, json.dumps(body).encode()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(b"0\r\n\r\n")
        self.conn.close()


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
        stream: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url.rstrip("/")
        self.token_file = token_file
        #: The wall clock heartbeats are stamped with when sent.
        self.clock = clock
        self.interval_s = interval_s
        self.backoff_max_s = backoff_max_s
        # An https URL is verified against ca_file (the chart's CA) or the system's CAs.
        verify: ssl.SSLContext | bool = (ssl.create_default_context(cafile=str(ca_file))
                                         if ca_file is not None else True)
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s, transport=transport,
                                  verify=verify)
        self._tls = verify if isinstance(verify, ssl.SSLContext) else (
            ssl.create_default_context() if self.url.startswith("https") else None)
        self._timeout_s = timeout_s
        # The stream needs a real socket: not with an injected transport.
        self._stream_after = 0.0 if stream and transport is None else float("inf")
        self._stream: HeartbeatStream | None = None
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
        self._refused_seen = False  # the manager kept a newer heartbeat (said once a streak)

    # -- called by the control loop -----------------------------------------------------------
    def offer_heartbeat(self, hb: Heartbeat) -> None:
        """The newest state to report; an older one not yet sent is replaced, not queued. It is
        sent once (stamped then); until a newer one comes nothing more is sent."""
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
        self._close_stream()
        self._http.close()

    # -- the thread ---------------------------------------------------------------------------
    def _token(self) -> str | None:
        # Read each time: projected service-account tokens are rotated on disk.
        return self.token_file.read_text().strip() if self.token_file is not None else None

    def _headers(self) -> dict[str, str]:
        token = self._token()
        return {"Authorization": f"Bearer {token}"} if token is not None else {}

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
                # the newest heartbeat not yet delivered (a delivered one is dropped below): a
                # loop that stops making them stops the heartbeats, and the manager sees the
                # node stale (specon_agent/health.py); a failed one is sent again
                hb = self._heartbeat if req is None else None
            if req is not None:
                self._send_request(req)
                continue
            if hb is not None:
                ok = self._send_heartbeat(hb)
                self.failures = 0 if ok else self.failures + 1
                if ok:
                    self.last_success = time.time()
                    with self._lock:
                        if self._heartbeat is hb:
                            self._heartbeat = None  # taken: never sent again
                elif self.failures in (1, 5) or self.failures % 20 == 0:
                    log.warning("manager away (%d heartbeats failed); FlowCon continues locally",
                                self.failures)
            next_hb = time.monotonic() + self._wait()

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _streamed(self, hb: Heartbeat) -> tuple[bool, bytes | None] | None:
        """The heartbeat sent on the stream (opened, or reopened when the token on disk has
        changed): (sent, the reply's JSON or None); None: no stream, send it alone. A stream
        kept from before that the manager has ended meanwhile (idle too long: 408, or a
        restart) is reopened and the heartbeat sent again, once."""
        try:
            token = self._token()
        except OSError:
            self._on_outcome("heartbeat", "no_token")
            return False, None
        if self._stream is not None and self._stream.token != token:
            self._close_stream()
        line = hb.model_dump_json().encode()
        for _attempt in range(2):
            reused = self._stream is not None
            if self._stream is None:
                try:
                    stream = HeartbeatStream(self.url, token, self._tls, self._timeout_s)
                except NoStream as exc:
                    log.info("heartbeats one request each for %.0f s: %s", STREAM_RETRY_S, exc)
                    self._stream_after = time.monotonic() + STREAM_RETRY_S
                    return None
                except (OSError, http.client.HTTPException):
                    return None  # not opened (manager away?): this one alone, the stream next
                if stream.refused is not None:
                    status, text = stream.refused
                    stream.close()
                    log.warning("manager answered %s to %s: %s", status, STREAM_PATH, text[:200])
                    self._on_outcome("heartbeat", f"http_{status // 100}xx")
                    return False, None
                self._stream = stream
            assert self._stream is not None
            try:
                status, body = self._stream.send(line)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                self._close_stream()
                if reused and not isinstance(exc, TimeoutError):
                    continue
                timeout = isinstance(exc, TimeoutError)
                self._on_outcome("heartbeat", "timeout" if timeout else "unreachable")
                return False, None
            if status in (401, 408, 413, 503):  # the manager ended the stream
                self._close_stream()
                if status in (408, 503) and reused:
                    continue  # idle too long, or a standby now: once more on a new connection
            if status != 200:
                log.warning("manager answered %s to a heartbeat: %s", status, body[:200])
                self._on_outcome("heartbeat", f"http_{status // 100}xx")
                return False, None
            self._on_outcome("heartbeat", "ok")
            return True, body
        self._on_outcome("heartbeat", "unreachable")
        return False, None

    def _send_heartbeat(self, hb: Heartbeat) -> bool:
        hb = hb.model_copy(update={"time": self.clock()})  # stamped now, not when built
        streamed = self._streamed(hb) if time.monotonic() >= self._stream_after else None
        if streamed is None:
            r = self._post("heartbeat", "/v1/heartbeat", hb.model_dump_json())
            content = r.content if r is not None else None
        else:
            content = streamed[1]
        if content is None:
            return False
        try:
            reply = HeartbeatReply.model_validate_json(content)
        except ValueError as exc:
            log.warning("manager's heartbeat reply is not understood: %s", exc)
            self._on_outcome("heartbeat", "bad_reply")
            return False
        if not reply.accepted and not self._refused_seen:
            log.warning("the manager kept a newer heartbeat of %s than seq %d; if this agent "
                        "restarted, the manager is of a release without boot ids", hb.node, hb.seq)
        self._refused_seen = not reply.accepted
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
