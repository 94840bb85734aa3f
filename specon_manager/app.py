"""The manager's HTTP API (FastAPI): the scheduler extender, the agents' heartbeat and
reallocation endpoints, /metrics, /healthz and /readyz; OpenAPI at /docs and /openapi.json
when ``expose_docs`` is set.

The hot routes (``POST /v1/heartbeat``, ``/v1/heartbeats``, ``/filter``, ``/prioritize``) are
answered by :class:`HotRoutes` before FastAPI sees the request (:class:`ManagerApp`): the same
handlers, without FastAPI's routing, middleware, telemetry, dependency and response-model
machinery per request (docs/manager.md has the numbers that chose it). FastAPI still declares
the three request/response ones, for the OpenAPI description.

No ``from __future__ import annotations`` here: FastAPI must see the real annotations of the
routes, which name dependencies local to :func:`create_app`."""


import logging
import time
from collections.abc import Callable
from typing import Annotated, Any, Protocol

import anyio
import orjson
from fastapi import FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from specon.core.policy import lookup
from specon.core.scoring import Weights
from specon.wire import (
    Heartbeat,
    HeartbeatReply,
    JobReport,
    Parameters,
    ReallocationReply,
    ReallocationRequest,
)
from specon_manager.auth import NodeTokens
from specon_manager.extender import (
    BadRequest,
    ExtenderArgs,
    ExtenderFilterResult,
    HostPriority,
    TooManyNodes,
    check_node_count,
    filter_nodes,
    names_over,
    prioritize_nodes,
)
from specon_manager.heartbeat_order import skew_reason
from specon_manager.identity import MAX_TOKEN_BYTES, Refusal, StaticTokens, TokenReviewer
from specon_manager.intake import (
    AGENT_PREFIX,
    EXTENDER_PATHS,
    NODE_KEY,
    STREAM_PATH,
    Answer,
    BodySlots,
    Intake,
    RequestGate,
    has_body,
    header,
    send_answer,
)
from specon_manager.intake import json_answer as _json
from specon_manager.kube import FENCED, KubeError
from specon_manager.metrics import ManagerMetrics
from specon_manager.qos_book import QosBook
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState
from specon_manager.status import router as status_router

log = logging.getLogger(__name__)

AGENT_PATHS = (AGENT_PREFIX,)
HOT_PATHS = frozenset({"/v1/heartbeat", STREAM_PATH, *EXTENDER_PATHS})
#: Extender bodies larger than this are decoded and answered on a worker thread, one at a
#: time, so that a large body never holds the event loop (heartbeats keep flowing).
INLINE_BODY_BYTES = 256 * 1024
#: ``pod_on_node(namespace, pod, uid, node)``: is this pod (by UID) on this node, from the
#: manager's pod cache? None: cannot tell (no cache), and the job is kept.
PodOnNode = Callable[[str, str, str, str], bool | None]
#: Who an agent is: a static ``TOKEN NODE`` file, or TokenReview of projected tokens.
AgentAuth = StaticTokens | TokenReviewer

class Reallocator(Protocol):
    """What the API needs from the migration controller."""

    def reallocate(self, node: str, req: ReallocationRequest) -> ReallocationReply: ...

    def ready(self) -> bool: ...

    #: False on a standby replica (leader election on, the Lease held by another).
    leader: bool


class LoopHealth(Protocol):
    """What /healthz and /readyz read from the background loop (specon_manager.service):
    why it is not alive, why this replica should get no traffic (None: fine)."""

    def health(self) -> str | None: ...

    def readiness(self) -> str | None: ...


#: A standby replica's answer to heartbeats and extender calls. Its state is not the leader's
#: (no heartbeats since the agents moved on, no reservations), so it must not be used; and the
#: connection is closed, so that the caller's next request opens a new one, which the Service
#: sends to the ready replica (a kept-alive connection would stay with this one: issue 15's
#: fault campaign found the agents heartbeating to a replica that had lost the Lease).
STANDBY = _json(503, {"detail": "standby replica, not the leader: retry (a new connection "
                                "reaches the leader)"}, ((b"connection", b"close"),))
SHUTTING_DOWN = _json(503, {"detail": "the manager is shutting down: retry (a new connection "
                                      "reaches the next leader)"})


def _problems(exc: ValidationError) -> list[dict[str, Any]]:
    # The first 20 errors, without the input (it can be large, and it is the caller's own).
    return [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors(include_url=False, include_input=False)[:20]]


class ListenerSplit:
    """With ``extender_port`` set, the extender's routes are served on that port only, and
    that port serves nothing else but ``/healthz``: its listener is the one that demands the
    scheduler's client certificate, so nobody reaches ``/filter`` without one."""

    def __init__(self, app: ASGIApp, extender_port: int) -> None:
        self.app = app
        self.extender_port = extender_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            server = scope.get("server") or ("", 0)
            on_extender = server[1] == self.extender_port
            path = scope.get("path", "")
            allowed = (path in EXTENDER_PATHS or path == "/healthz") if on_extender else (
                path not in EXTENDER_PATHS)
            if not allowed:  # unread: the connection is closed when a body was sent
                await send_answer(send, _json(404, {"detail": "Not Found"}), close=has_body(scope))
                return
        await self.app(scope, receive, send)


class Handlers:
    """The agents' and the scheduler's hot calls, as bytes in and :class:`Answer` out: shared by
    :class:`HotRoutes` and the FastAPI routes (one implementation)."""

    def __init__(self, settings: ManagerSettings, state: ClusterState, auth: AgentAuth,
                 metrics: ManagerMetrics, book: QosBook, parameters: Parameters,
                 node_exists: Callable[[str], bool | None] | None,
                 pod_on_node: PodOnNode | None,
                 wall_clock: Callable[[], float] = time.time,
                 standby: Callable[[], bool] = lambda: False) -> None:
        self.settings = settings
        self.state = state
        self.auth = auth
        self.m = metrics
        self.book = book
        self.parameters = parameters
        self.node_exists = node_exists
        self.pod_on_node = pod_on_node
        self.wall_clock = wall_clock
        self.standby = standby
        # TokenReviews (a token not yet in the cache) run on worker threads, a few at a time,
        # so that a flood of unknown tokens neither blocks the event loop nor the API server.
        self.reviews = anyio.CapacityLimiter(4)
        self.sched = settings.scheduler_name
        # Counter children bound once: labels() costs a dict look-up and a lock per call.
        hb = metrics.heartbeats
        self.c_accepted = hb.labels("accepted")
        self.c_superseded = metrics.heartbeats_superseded
        self.c_unauth = hb.labels("unauthenticated")
        self.c_forbidden = hb.labels("forbidden")
        self.c_invalid = hb.labels("invalid")
        self.c_skew = hb.labels("clock_skew")
        self.c_unknown_node = hb.labels("unknown_node")
        self.c_standby = hb.labels("standby")
        self.c_unknown_pods = metrics.heartbeat_jobs_ignored
        self._plain = {ok: HeartbeatReply(accepted=ok, parameters=parameters).model_dump_json()
                       .encode() for ok in (True, False)}
        self._stream_plain = {p: b'{"status":200,"reply":' + p + b"}\n"
                              for p in self._plain.values()}
        # One large extender body at a time, on a worker thread.
        self.big = anyio.CapacityLimiter(1)

    # -- agents -----------------------------------------------------------------------------
    @staticmethod
    def bearer(authorization: str | None) -> str | Refusal:
        if not authorization or not authorization.startswith("Bearer "):
            return Refusal("missing", "missing bearer token")
        token = authorization[7:].strip()
        if not token:
            return Refusal("missing", "missing bearer token")
        if len(token) > MAX_TOKEN_BYTES:  # refused unread
            return Refusal("malformed", "bearer token too long")
        return token

    def agent_answer(self, found: str | Refusal) -> str | Answer:
        """The node, or the refusal (401; 503 when the API server could not be asked),
        counted by reason."""
        if isinstance(found, str):
            return found
        self.c_unauth.inc()
        self.m.agent_auth_refusals.labels(found.reason).inc()
        log.info("agent refused (%s): %s", found.reason, found.detail)
        return _json(found.status, {"detail": found.detail},
                     ((b"www-authenticate", b"Bearer"),) if found.status == 401 else ())

    def agent_node(self, authorization: str | None) -> str | Answer:
        """The node the bearer token speaks for, or the refusal (may wait for a TokenReview:
        call from a worker thread, or use :meth:`agent_node_async`)."""
        token = self.bearer(authorization)
        if isinstance(token, Refusal):
            return self.agent_answer(token)
        return self.agent_answer(self.auth.authenticate(token))

    async def agent_node_async(self, authorization: str | None) -> str | Answer:
        """:meth:`agent_node` for the event loop: a cached token is answered at once, a new
        one is reviewed on a worker thread."""
        token = self.bearer(authorization)
        if isinstance(token, Refusal):
            return self.agent_answer(token)
        return await self.token_node(token)

    async def token_node(self, token: str) -> str | Answer:
        """The node a bearer token speaks for, or the refusal: from the cache, else reviewed
        on a worker thread."""
        found = self.auth.cached(token)
        if found is None:
            found = await anyio.to_thread.run_sync(self.auth.authenticate, token,
                                                   limiter=self.reviews)
        return self.agent_answer(found)

    def check_node(self, token_node: str, claimed: str) -> Answer | None:
        if claimed != token_node:
            self.c_forbidden.inc()
            return _json(403, {"detail": f"this token speaks for node {token_node!r}, not for "
                                         f"{claimed!r}"})
        if self.node_exists is not None and self.node_exists(claimed) is False:
            self.c_unknown_node.inc()
            return _json(422, {"detail": f"node {claimed!r} is not a node of this cluster"})
        return None

    def heartbeat(self, node: str | Answer, body: bytes) -> Answer:
        """For the authenticated ``node`` (or its refusal): validate, bound, check the jobs
        against the pod cache, record."""
        if isinstance(node, Answer):
            return node
        if self.standby():
            self.c_standby.inc()
            return STANDBY
        try:
            hb = Heartbeat.model_validate_json(body)
        except ValidationError as exc:
            self.c_invalid.inc()
            return _json(422, {"detail": _problems(exc)})
        refused = self.check_node(node, hb.node)
        if refused is not None:
            return refused
        skew = hb.time - self.wall_clock()
        if abs(skew) > self.settings.max_clock_skew_s:
            self.c_skew.inc()
            return _json(422, {"detail": skew_reason(hb, skew, self.settings.max_clock_skew_s)})
        kept = self._known_jobs(hb) if self.pod_on_node is not None and hb.jobs else hb
        recorded = self.state.record(kept, body if kept is hb else None)
        self.c_accepted.inc()
        if not recorded:  # valid, but older than the node's last: answered accepted=false
            self.c_superseded.inc()
        reqs = self.state.checkpoint_requests(node)
        if not reqs:
            return Answer(200, self._plain[recorded])
        reply = HeartbeatReply(accepted=recorded, parameters=self.parameters,
                               checkpoint=[f"{r.namespace}/{r.pod}" for r in reqs],
                               checkpoint_requests=reqs)
        return Answer(200, reply.model_dump_json().encode())

    def _known_jobs(self, hb: Heartbeat) -> Heartbeat:
        """The heartbeat without the jobs that are not pods on its node (by UID): a node
        cannot speak for pods it does not run, nor stall a controller with a pod that does
        not exist. Counted, never refused: the rest of the report is good."""
        assert self.pod_on_node is not None
        kept: list[JobReport] = []
        for j in hb.jobs:
            if self.pod_on_node(j.namespace, j.pod, j.uid, hb.node) is False:
                self.c_unknown_pods.inc()
                log.debug("heartbeat of %s: %s/%s (uid %r) is not a pod on that node; ignored",
                          hb.node, j.namespace, j.pod, j.uid)
                continue
            kept.append(j)
        return hb if len(kept) == len(hb.jobs) else hb.model_copy(update={"jobs": kept})

    def stream_line(self, a: Answer) -> bytes:
        """A heartbeat's answer as a line of the stream (:meth:`HotRoutes.stream`)."""
        if a.status == 200:
            return self._stream_plain.get(a.body) or b'{"status":200,"reply":' + a.body + b"}\n"
        detail = orjson.loads(a.body).get("detail", "") if a.body else ""
        return orjson.dumps({"status": a.status, "detail": detail}) + b"\n"

    # -- kube-scheduler -----------------------------------------------------------------------
    async def extender_async(self, verb: str, body: bytes) -> Answer:
        """:meth:`extender`, a large body on a worker thread (one at a time), so that its
        decode and checks never hold the event loop that answers the heartbeats."""
        if len(body) <= INLINE_BODY_BYTES:
            return self.extender(verb, body)
        return await anyio.to_thread.run_sync(self.extender, verb, body, limiter=self.big)

    def peek_names(self, verb: str, start: bytes) -> Answer | None:
        """413 for an extender body whose (undecoded) start already lists more NodeNames than
        ``max_extender_nodes``: an oversized list is refused after its first few hundred KB,
        the rest never read nor decoded."""
        limit = self.settings.max_extender_nodes
        over = names_over(start, limit)
        if over is None:
            return None
        self.m.extender_requests.labels(verb.lstrip("/"), "too_many_nodes").inc()
        return _json(413, {"detail": f"NodeNames names at least {over} nodes, over the "
                                     f"manager's max_extender_nodes ({limit}): refused"})

    def extender(self, verb: str, body: bytes) -> Answer:
        if self.standby():
            self.m.extender_requests.labels(verb, "standby").inc()
            return STANDBY
        start = time.perf_counter()
        limit = self.settings.max_extender_nodes
        refused = self.peek_names(verb, body) if len(body) > INLINE_BODY_BYTES else None
        if refused is not None:
            return refused
        try:
            args = orjson.loads(body)
        except orjson.JSONDecodeError as exc:  # also too deep: orjson stops at 1024 levels
            self.m.extender_requests.labels(verb, "bad_request").inc()
            return _json(400, {"detail": f"body is not JSON: {exc}"})
        try:
            if not isinstance(args, dict):
                raise BadRequest("ExtenderArgs must be a JSON object")
            check_node_count(args, limit)
            if verb == "filter":
                out = Answer(200, orjson.dumps(filter_nodes(self.state, args, self.sched,
                                                            self.book)))
            else:
                out = Answer(200, prioritize_nodes(self.state, args, self.sched, self.book))
        except TooManyNodes as exc:
            self.m.extender_requests.labels(verb, "too_many_nodes").inc()
            return _json(413, {"detail": str(exc)})
        except BadRequest as exc:
            self.m.extender_requests.labels(verb, "bad_request").inc()
            return _json(400, {"detail": str(exc)})
        self.m.extender_requests.labels(verb, "ok").inc()
        self.m.extender_seconds.labels(verb).observe(time.perf_counter() - start)
        return out


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


class ManagerApp(FastAPI):
    """The FastAPI app, with :class:`HotRoutes` answering the hot calls before FastAPI's own
    machinery (middleware, telemetry, routing) runs at all."""

    hot: HotRoutes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hot = self.hot
        if hot is not None and hot.serves(scope):
            await hot(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def create_app(
    settings: ManagerSettings,
    state: ClusterState | None = None,
    tokens: NodeTokens | None = None,
    auth: AgentAuth | None = None,
    controller: Reallocator | None = None,
    node_exists: Callable[[str], bool | None] | None = None,
    metrics: ManagerMetrics | None = None,
    qos: QosBook | None = None,
    pod_on_node: PodOnNode | None = None,
    hot_routes: bool = True,
    loop: LoopHealth | None = None,
) -> FastAPI:
    """The API over ``state``. ``node_exists(name)`` (None: cannot tell) refuses heartbeats for
    nodes the cluster does not have; ``pod_on_node`` (None: no pod cache) drops reported jobs
    that are not pods on the reporting node; ``controller`` decides reallocation requests;
    ``qos`` reads training pods' QoS annotations (default: a book that only logs malformed
    ones). ``hot_routes=False`` leaves the hot routes to FastAPI (the same handlers; what
    ``benchmarks/heartbeat_path.py`` compares against)."""
    if state is None:
        state = ClusterState(
            stale_after_s=settings.heartbeat_interval_s * settings.stale_after_intervals,
            weights=Weights(settings.weight_progressing, settings.weight_watching,
                            settings.weight_converged),
            placement=lookup(settings.policy).placement,
            reorder_window_s=settings.heartbeat_reorder_window_s)
    if auth is None:
        if tokens is None:
            tokens = NodeTokens.from_file(settings.tokens_file) if settings.tokens_file else (
                NodeTokens())
        auth = StaticTokens(tokens)
    m = metrics or ManagerMetrics()
    book = qos if qos is not None else QosBook(on_invalid=m.qos_invalid.inc)
    parameters = Parameters(alpha=settings.alpha, interval_s=settings.interval_s,
                            flowcon_alpha=settings.flowcon_alpha,
                            flowcon_beta=settings.flowcon_beta)
    h = Handlers(settings, state, auth, m, book, parameters, node_exists, pod_on_node,
                 standby=lambda: controller is not None and not controller.leader)

    docs = settings.expose_docs
    app = ManagerApp(title="SpeCon manager", version="1",
                  description="Scheduler extender and agent API of SpeCon (docs/manager.md).",
                  docs_url="/docs" if docs else None, redoc_url="/redoc" if docs else None,
                  openapi_url="/openapi.json" if docs else None)
    app.state.cluster = state
    app.state.metrics = m
    app.state.settings = settings
    app.state.qos = book
    app.state.handlers = h

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        # loc, msg and type only: the input and its context may hold values JSON cannot
        # carry (1e999 is read as inf), and they are the caller's own anyway.
        if request.url.path.startswith(AGENT_PATHS):
            h.c_invalid.inc()
        errors = [{"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", "")),
                   "type": str(e.get("type", ""))} for e in exc.errors()[:20]]
        return Response(orjson.dumps({"detail": errors}), status_code=422,
                        media_type="application/json")

    def answer(a: Answer) -> Response:
        return Response(a.body, status_code=a.status, media_type="application/json",
                        headers={k.decode(): v.decode() for k, v in a.headers})

    # The three hot routes below are served by HotRoutes; FastAPI sees them only when the app
    # is mounted without it. They are declared for the OpenAPI description.
    heartbeat_doc: dict[str, Any] = {"requestBody": {"required": True, "content": {
        "application/json": {"schema": Heartbeat.model_json_schema()}}}}

    @app.post("/v1/heartbeat", tags=["agents"], openapi_extra=heartbeat_doc,
              responses={200: {"model": HeartbeatReply}})
    async def heartbeat(request: Request,
                        authorization: Annotated[str | None, Header()] = None) -> Response:
        """An agent's report of its node and jobs; the reply carries the parameters and the
        checkpoint requests for migrations in flight."""
        node = request.scope.get(NODE_KEY) or await h.agent_node_async(authorization)
        return answer(h.heartbeat(node, await request.body()))

    @app.post("/v1/reallocate", response_model=ReallocationReply, tags=["agents"])
    def reallocate(request: Request, req: ReallocationRequest,
                   authorization: Annotated[str | None, Header()] = None) -> Response:
        """Algorithm 3's immediate request to move a converged job; decided at once."""
        # The gate authenticated the token before the body was read (intake.RequestGate).
        node = request.scope.get(NODE_KEY) or h.agent_node(authorization)
        if isinstance(node, Answer):
            return answer(node)
        refused = h.check_node(node, req.node)
        if refused is not None:
            return answer(refused)
        if controller is None:
            reply = ReallocationReply(decision="refused",
                                      reason="migration is disabled on this manager")
        else:
            try:
                reply = controller.reallocate(node, req)
            except KubeError as exc:
                # The manager may write pods only where the chart bound its writer role
                # (manager.trainingNamespaces): elsewhere the API server refuses the first
                # record, nothing was changed, and the job stays.
                log.warning("reallocation of %s/%s not started: %s", req.namespace, req.pod, exc)
                reply = ReallocationReply(decision="refused", reason=(
                    f"the API server refused the migration ({exc.status} {exc.reason}); is "
                    f"{req.namespace} one of the manager's training namespaces?"
                    if exc.status == 403 else
                    "this replica lost the Lease before the migration was recorded: nothing "
                    "was started; ask again (a new connection reaches the leader)"
                    if exc.status == FENCED else f"the API server could not be asked ({exc})"))
        m.reallocation_requests.labels(reply.decision).inc()
        return Response(reply.model_dump_json(), media_type="application/json")

    extender_doc: dict[str, Any] = {"requestBody": {"required": True, "content": {
        "application/json": {"schema": ExtenderArgs.model_json_schema()}}}}

    @app.post("/filter", tags=["extender"], openapi_extra=extender_doc,
              responses={200: {"model": ExtenderFilterResult}})
    async def filter_(request: Request) -> Response:
        """kube-scheduler's filter call (ExtenderArgs -> ExtenderFilterResult)."""
        return answer(await h.extender_async("filter", await request.body()))

    @app.post("/prioritize", tags=["extender"], openapi_extra=extender_doc,
              responses={200: {"model": list[HostPriority]}})
    async def prioritize(request: Request) -> Response:
        """kube-scheduler's prioritize call (ExtenderArgs -> HostPriorityList, scores 0-10)."""
        return answer(await h.extender_async("prioritize", await request.body()))

    if settings.expose_metrics:
        @app.get("/metrics", tags=["operations"])
        def metrics_() -> Response:
            fresh, stale = state.node_counts()
            m.nodes.labels("fresh").set(fresh)
            m.nodes.labels("stale").set(stale)
            for cat, n in state.category_counts().items():
                m.jobs.labels(cat.value).set(n)
            for qos_state, n in state.qos_counts().items():
                m.qos_jobs.labels(qos_state).set(n)
            return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", tags=["operations"], response_class=PlainTextResponse)
    def healthz() -> PlainTextResponse:
        why = loop.health() if loop is not None else None
        if why is not None:
            return PlainTextResponse(why, status_code=503)
        return PlainTextResponse("ok")

    @app.get("/readyz", tags=["operations"], response_class=PlainTextResponse)
    def readyz() -> PlainTextResponse:
        why = loop.readiness() if loop is not None else None
        if why is not None:
            return PlainTextResponse(why, status_code=503)
        if controller is not None and not controller.ready():
            return PlainTextResponse("not the leader, or restoring migrations in flight",
                                     status_code=503)
        return PlainTextResponse("ok")

    def refused(status: int) -> None:
        if status == 413:
            m.bodies_refused.inc()
        else:
            m.bodies_dropped.labels("timeout" if status == 408 else "busy").inc()

    intake = Intake(settings.max_agent_body_bytes, settings.max_extender_body_bytes,
                    settings.body_timeout_s, BodySlots(settings.max_unauthenticated_bodies),
                    trusted_port=settings.extender_port if settings.extender_client_ca_file
                    else 0, on_refuse=refused, peek_extender=h.peek_names)
    app.add_middleware(RequestGate, intake=intake, authenticate=h.agent_node_async)
    if hot_routes:
        app.hot = HotRoutes(h, intake)
    if settings.extender_port:
        app.add_middleware(ListenerSplit, extender_port=settings.extender_port)
    if settings.expose_status:
        app.include_router(status_router)
    return app
