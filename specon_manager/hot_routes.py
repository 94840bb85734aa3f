"""The hot routes (:class:`HotRoutes`): ``POST /v1/heartbeat``, ``/v1/heartbeats`` (one
agent's heartbeats on one streamed request), ``/filter`` and ``/prioritize``, answered as a
plain ASGI app before FastAPI sees the request (:class:`specon_manager.app.ManagerApp`):
the bounded body read, then :class:`specon_manager.hot_calls.Handlers`, without FastAPI's
routing, middleware, telemetry, dependency and response-model machinery per request."""

from __future__ import annotations

import anyio
from starlette.types import Receive, Scope, Send

from specon_manager.hot_calls import SHUTTING_DOWN, STANDBY, Handlers
from specon_manager.identity import Refusal
from specon_manager.intake import (
    EXTENDER_PATHS,
    STREAM_PATH,
    Answer,
    Intake,
    header,
    send_answer,
)
from specon_manager.intake import json_answer as _json

HOT_PATHS = frozenset({"/v1/heartbeat", STREAM_PATH, *EXTENDER_PATHS})


class HotRoutes:
    """A plain ASGI app for ``POST /v1/heartbeat``, ``/v1/heartbeats``, ``/filter`` and
    ``/prioritize``: bounded body read, then :class:`Handlers`."""

    def __init__(self, handlers: Handlers, intake: Intake) -> None:
        self.h = handlers
        self.intake = intake
        s = handlers.settings
        self.agent_limit = s.max_agent_body_bytes
        self.extender_port = s.extender_port
        # A stream with no heartbeat for as long as makes its node stale is ended.
        self.stream_idle_s = s.heartbeat_interval_s * s.stale_after_intervals
        self._streams: set[anyio.CancelScope] = set()

    def end_streams(self) -> None:
        """At shutdown (on the event loop): every open stream ends with a 503 line, as a
        standby's does; its agent opens the next one, which reaches the next leader. A stream
        never ends by itself, and the shutdown would wait for it."""
        for scope in list(self._streams):
            scope.cancel()

    def serves(self, scope: Scope) -> bool:
        """Is this request one of the hot calls, on a listener that serves it (with
        ``extender_port``, the extender's calls there only, the agents' elsewhere)?"""
        if scope["type"] != "http" or scope["path"] not in HOT_PATHS or scope["method"] != "POST":
            return False
        if not self.extender_port:
            return True
        server = scope.get("server") or ("", 0)
        return (server[1] == self.extender_port) == (scope["path"] in EXTENDER_PATHS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if path in EXTENDER_PATHS:
            body = await self.intake.extender_body(scope, receive)
            if isinstance(body, Answer):
                await self._refuse(send, body)
                return
            await send_answer(send, await self.h.extender_async(path[1:], body))
            return
        authorization = header(scope, b"authorization")
        if path == STREAM_PATH:
            await self.stream(authorization, receive, send)
            return
        # The token first: a refused caller's body is never read (docs/security.md).
        node = await self.h.agent_node_async(authorization)
        if isinstance(node, Answer):
            await send_answer(send, node, close=True)
            return
        body = await self.intake.agent_body(scope, receive)
        if isinstance(body, Answer):
            await self._refuse(send, body)
            return
        await send_answer(send, self.h.heartbeat(node, body))

    async def stream(self, authorization: str | None, receive: Receive, send: Send) -> None:
        """One agent's heartbeats on one request: the body is a stream of heartbeats, one JSON
        object a line (NDJSON), sent as the agent makes them; the answer, a stream of one line
        per heartbeat, in order: ``{"status":200,"reply":<HeartbeatReply>}`` or
        ``{"status":4xx,"detail":...}``. Each heartbeat is authenticated (the request's token,
        looked up again, so an expired or revoked one ends the stream with a 401 line) and
        validated as a single one is; a line over ``max_agent_body_bytes`` ends the stream
        with a 413 line, and so does silence for as long as makes a node stale (408). A token
        refused at the start is answered as on ``/v1/heartbeat``.
        What it saves: the HTTP request, its parsing and its task, per heartbeat."""
        token = self.h.bearer(authorization)
        node = self.h.agent_answer(token) if isinstance(token, Refusal) else (
            await self.h.token_node(token))
        if isinstance(node, Answer):
            await send_answer(send, node, close=True)
            return
        if self.h.standby():  # 503 and the connection closed, as for a single heartbeat
            self.h.c_standby.inc()
            await send_answer(send, STANDBY)
            return
        assert isinstance(token, str)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/x-ndjson")]})
        self.h.m.heartbeat_streams.inc()
        ending = anyio.CancelScope()
        self._streams.add(ending)
        try:
            with ending:
                await self._stream(token, receive, send)
            self._streams.discard(ending)
            if ending.cancelled_caught:
                await send({"type": "http.response.body", "more_body": False,
                            "body": self.h.stream_line(SHUTTING_DOWN)})
        finally:
            self._streams.discard(ending)
            self.h.m.heartbeat_streams.dec()

    async def _stream(self, token: str, receive: Receive, send: Send) -> None:
        pending: list[bytes] = []  # the start of a line not yet ended (kept in parts: linear)
        waiting = 0
        more = True
        while more:
            with anyio.move_on_after(self.stream_idle_s) as idle:
                msg = await receive()
            if idle.cancelled_caught:
                await send({"type": "http.response.body", "more_body": False, "body": (
                    self.h.stream_line(_json(408, {"detail": (
                        f"no heartbeat for {self.stream_idle_s:.0f} s: stream ended")})))})
                return
            if msg["type"] != "http.request":
                return  # the agent went away
            more = msg.get("more_body", False)
            chunk = msg.get("body", b"")
            if more and b"\n" not in chunk:
                pending.append(chunk)
                waiting += len(chunk)
                if waiting <= self.agent_limit:
                    continue
                lines = []
            else:
                lines = b"".join([*pending, chunk]).split(b"\n")
                pending = [lines.pop()] if more else []
                waiting = len(pending[0]) if pending else 0
            out: list[bytes] = []
            for line in lines:
                if len(line) > self.agent_limit:
                    more = False
                    self.h.m.bodies_refused.inc()
                    out.append(self.h.stream_line(_json(413, {"detail": (
                        f"heartbeat of {len(line)} bytes is over the limit of "
                        f"{self.agent_limit} bytes")})))
                    break
                if not line.strip():
                    continue
                found = self.h.auth.cached(token)  # each heartbeat: the token looked up again
                node = self.h.agent_answer(found) if found is not None else (
                    await self.h.token_node(token))
                answer = self.h.heartbeat(node, line)
                out.append(self.h.stream_line(answer))
                if isinstance(node, Answer) or answer is STANDBY:
                    # A refused token, or this replica lost the Lease meanwhile: the stream
                    # ends, and the agent's next one reaches the leader through the Service.
                    more = False
                    break
            if more and waiting > self.agent_limit:
                more = False
                self.h.m.bodies_refused.inc()
                out.append(self.h.stream_line(_json(413, {"detail": (
                    f"heartbeat over the limit of {self.agent_limit} bytes")})))
            if out or not more:
                await send({"type": "http.response.body", "body": b"".join(out),
                            "more_body": more})

    async def _refuse(self, send: Send, a: Answer) -> None:
        if a.status != 499:  # counted by the intake
            await send_answer(send, a, close=True)
