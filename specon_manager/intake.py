"""What the manager reads of a request, and when (issue 29): a body is read only once the
request has a reason to be answered, and never for long.

- An agent's call (``/v1/...``) is authenticated from its headers (the bearer token, looked up
  in the cache or reviewed) **before** a byte of its body is read; a refused one is answered
  unread and its connection closed.
- A body is read within ``body_timeout_s`` (10 s); a body still incomplete then is dropped:
  408 and the connection closed. Over its size limit it is refused with 413, from
  ``Content-Length`` before it is read, or as soon as the streamed bytes pass it.
- Bodies whose sender is not authenticated (the extender's calls on a listener that does not
  demand the scheduler's client certificate) are read at most ``max_unauthenticated_bodies``
  (8) at a time; more are answered 503 unread.
- A request with a body that no route reads (any other path or method) is answered by the
  routes as before, without reading it, and its connection is closed.

:class:`RequestGate` does this in front of FastAPI's routes; the hot routes
(:class:`specon_manager.hot_routes.HotRoutes`) call the same pieces themselves. Before, every
non-GET request on the main port (even to an unknown path) was read up to 2 MiB before
anything else, with no time limit: ~181 stalled connections took the manager past the chart's
512 MiB memory limit.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

AGENT_PREFIX = "/v1/"
EXTENDER_PATHS = ("/filter", "/prioritize")
#: One agent's heartbeats on one long-lived request (its body is a stream, never buffered).
STREAM_PATH = "/v1/heartbeats"
#: The only bodies any route reads.
POST_PATHS = frozenset({"/v1/heartbeat", STREAM_PATH, "/v1/reallocate", *EXTENDER_PATHS})
#: The scope key under which the gate leaves the node an agent's token speaks for.
NODE_KEY = "specon.node"
CLOSE = (b"connection", b"close")


@dataclass(frozen=True, slots=True)
class Answer:
    """A handler's answer: status, JSON body, extra headers."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()


def json_answer(status: int, obj: Any, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Answer:
    return Answer(status, orjson.dumps(obj), headers)


async def send_answer(send: Send, a: Answer, close: bool = False) -> None:
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(a.body)).encode()), *a.headers]
    if (close or a.status in (408, 413)) and CLOSE not in headers:
        headers.append(CLOSE)
    await send({"type": "http.response.start", "status": a.status, "headers": headers})
    await send({"type": "http.response.body", "body": a.body})


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def has_body(scope: Scope) -> bool:
    """Does the request say it carries a body (a non-zero Content-Length, or chunks)?"""
    length = header(scope, b"content-length")
    return header(scope, b"transfer-encoding") is not None or (
        length is not None and length.strip() not in ("", "0"))


#: A body's start is shown to ``peek`` once this many bytes are in, and again at each doubling.
PEEK_BYTES = 256 * 1024

#: ``peek(the body so far)``: the refusal, or None to read on.
Peek = Callable[[bytes], "Answer | None"]


async def read_body(receive: Receive, scope: Scope, limit: int, timeout_s: float,
                    peek: Peek | None = None) -> bytes | Answer:
    """The request body, or the refusal: 413 at once when Content-Length is over ``limit``
    (nothing read), or as soon as the streamed bytes pass it; ``peek``'s, from the body's
    start (:data:`PEEK_BYTES`, then at each doubling): the rest is then received and dropped,
    neither kept nor looked at, so that a client that sends its whole body before it reads
    gets the answer, not a reset connection; 408 when it is not complete within
    ``timeout_s``; 499 when the client went away."""
    length = header(scope, b"content-length")
    if length is not None:
        try:
            declared = int(length)
        except ValueError:
            return json_answer(400, {"detail": "Content-Length is not a number"}, (CLOSE,))
        if declared > limit:
            return json_answer(413, {"detail": f"request body of {declared} bytes is over the "
                                               f"limit of {limit} bytes"})
    chunks: list[bytes] = []
    seen = 0
    next_peek = PEEK_BYTES
    refused: Answer | None = None
    with anyio.move_on_after(timeout_s):
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                return Answer(499, b"")  # the client went away
            chunk = msg.get("body", b"")
            seen += len(chunk)
            if seen > limit:
                return json_answer(413, {"detail": f"request body over the limit of {limit} "
                                                   "bytes"})
            more = msg.get("more_body", False)
            if refused is not None:
                if not more:
                    return refused
                continue
            chunks.append(chunk)
            if not more:
                return b"".join(chunks)
            if peek is not None and seen >= next_peek:
                next_peek = 2 * seen
                refused = peek(b"".join(chunks))
                if refused is not None:
                    chunks = []
    if refused is not None:  # the rest did not come in time: the refusal stands
        return refused
    return json_answer(408, {"detail": f"request body not complete within {timeout_s:g} s"})


class BodySlots:
    """At most ``n`` unauthenticated bodies read at once (one event loop: no lock needed)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.busy = 0

    def enter(self) -> bool:
        if self.busy >= self.n:
            return False
        self.busy += 1
        return True

    def leave(self) -> None:
        self.busy -= 1


BUSY = json_answer(503, {"detail": "too many unauthenticated request bodies being read: "
                                   "retry"}, (CLOSE,))


def closing(send: Send) -> Send:
    """``send`` with ``Connection: close`` added to the response (a body was left unread)."""
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", ()))
            if CLOSE not in headers:
                headers.append(CLOSE)
            message = {**message, "headers": headers}
        await send(message)
    return wrapped


@dataclass
class Intake:
    """The limits, shared by :class:`RequestGate` and the hot routes."""

    agent_limit: int
    extender_limit: int
    timeout_s: float
    slots: BodySlots
    #: The listener whose TLS handshake demands the scheduler's client certificate (0: none):
    #: its bodies come from an authenticated client and take no slot.
    trusted_port: int = 0
    #: Called with the status of each body refused (413) or dropped (408, 503).
    on_refuse: Callable[[int], None] = lambda status: None
    #: ``peek_extender(path, the body so far)``: an extender body's refusal from its start
    #: (:func:`read_body`'s ``peek``), or None to read on.
    peek_extender: Callable[[str, bytes], Answer | None] | None = None

    def trusted(self, scope: Scope) -> bool:
        server = scope.get("server") or ("", 0)
        return bool(self.trusted_port) and server[1] == self.trusted_port

    async def extender_body(self, scope: Scope, receive: Receive) -> bytes | Answer:
        """An extender call's body; from an unauthenticated client only in a free slot."""
        path = scope["path"]
        look = self.peek_extender
        peek = None if look is None else lambda start: look(path, start)
        if self.trusted(scope):
            return self.counted(await read_body(receive, scope, self.extender_limit,
                                                self.timeout_s, peek))
        if not self.slots.enter():
            return self.counted(BUSY)
        try:
            return self.counted(await read_body(receive, scope, self.extender_limit,
                                                self.timeout_s, peek))
        finally:
            self.slots.leave()

    async def agent_body(self, scope: Scope, receive: Receive) -> bytes | Answer:
        """An authenticated agent's body."""
        return self.counted(await read_body(receive, scope, self.agent_limit, self.timeout_s))

    def counted(self, body: bytes | Answer) -> bytes | Answer:
        if isinstance(body, Answer) and body.status in (408, 413, 503):
            self.on_refuse(body.status)
        return body


#: ``authenticate(authorization header)``: the node, or the refusal to send.
Authenticate = Callable[[str | None], Awaitable["str | Answer"]]


class RequestGate:
    """In front of FastAPI's routes: an agent's POST is authenticated before its body is read
    (the node left in ``scope[NODE_KEY]``), every read body is bounded in size and time and
    replayed to the route; any other request that carries a body is left to the routes (none
    reads it) and its connection closed."""

    def __init__(self, app: ASGIApp, intake: Intake, authenticate: Authenticate) -> None:
        self.app = app
        self.intake = intake
        self.authenticate = authenticate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if scope.get("method") != "POST" or path not in POST_PATHS:
            await self.app(scope, receive, closing(send) if has_body(scope) else send)
            return
        if path.startswith(AGENT_PREFIX):
            node = await self.authenticate(header(scope, b"authorization"))
            if isinstance(node, Answer):
                await send_answer(send, node, close=True)
                return
            scope[NODE_KEY] = node
            if path == STREAM_PATH:  # a stream, read by its handler line by line
                await self.app(scope, receive, send)
                return
            body = await self.intake.agent_body(scope, receive)
        else:
            body = await self.intake.extender_body(scope, receive)
        if isinstance(body, Answer):
            if body.status != 499:
                await send_answer(send, body, close=True)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
