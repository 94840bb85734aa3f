"""The manager's HTTP API (FastAPI): the scheduler extender, the agents' heartbeat and
reallocation endpoints, /metrics, /healthz and /readyz. OpenAPI at /docs and /openapi.json.

No ``from __future__ import annotations`` here: FastAPI must see the real annotations of the
routes, which name dependencies local to :func:`create_app`."""


import json
import logging
import time
from collections.abc import Callable
from typing import Annotated, Any, Protocol

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from specon.core.scoring import Weights
from specon.wire import (
    Heartbeat,
    HeartbeatReply,
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
    filter_nodes,
    prioritize_nodes,
)
from specon_manager.metrics import ManagerMetrics
from specon_manager.qos import QosBook
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState
from specon_manager.status import router as status_router

log = logging.getLogger(__name__)

AGENT_PATHS = ("/v1/",)
EXTENDER_PATHS = ("/filter", "/prioritize")

class Reallocator(Protocol):
    """What the API needs from the migration controller."""

    def reallocate(self, node: str, req: ReallocationRequest) -> ReallocationReply: ...

    def ready(self) -> bool: ...


class BodyLimit:
    """Refuses a body over the path's limit with 413: at once when Content-Length says so
    (before a byte of the body is read), otherwise as soon as the streamed body passes it
    (the body is read here, then replayed to the app)."""

    def __init__(self, app: ASGIApp, agent_limit: int, extender_limit: int,
                 on_refuse: Callable[[], None]) -> None:
        self.app = app
        self.agent_limit = agent_limit
        self.extender_limit = extender_limit
        self.on_refuse = on_refuse

    def _limit(self, path: str) -> int:
        if path.startswith(EXTENDER_PATHS):
            return self.extender_limit
        return self.agent_limit

    async def _refuse(self, send: Send, status: int, detail: str) -> None:
        self.on_refuse()
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope.get("path", ""))
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    await self._refuse(send, 400, "Content-Length is not a number")
                    return
                if length > limit:
                    await self._refuse(send, 413, f"request body of {length} bytes is over the "
                                                  f"limit of {limit} bytes")
                    return
        chunks: list[bytes] = []
        seen = 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                return  # the client went away
            chunk = msg.get("body", b"")
            seen += len(chunk)
            if seen > limit:
                await self._refuse(send, 413, f"request body over the limit of {limit} bytes")
                return
            chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def create_app(
    settings: ManagerSettings,
    state: ClusterState | None = None,
    tokens: NodeTokens | None = None,
    controller: Reallocator | None = None,
    node_exists: Callable[[str], bool | None] | None = None,
    metrics: ManagerMetrics | None = None,
    qos: QosBook | None = None,
) -> FastAPI:
    """The API over ``state``. ``node_exists(name)`` (None: cannot tell) refuses heartbeats for
    nodes the cluster does not have; ``controller`` decides reallocation requests; ``qos``
    reads training pods' QoS annotations (default: a book that only logs malformed ones)."""
    if state is None:
        state = ClusterState(
            stale_after_s=settings.heartbeat_interval_s * settings.stale_after_intervals,
            weights=Weights(settings.weight_progressing, settings.weight_watching,
                            settings.weight_converged))
    if tokens is None:
        tokens = NodeTokens.from_file(settings.tokens_file) if settings.tokens_file else (
            NodeTokens())
    m = metrics or ManagerMetrics()
    book = qos if qos is not None else QosBook(on_invalid=m.qos_invalid.inc)
    parameters = Parameters(alpha=settings.alpha, interval_s=settings.interval_s,
                            flowcon_alpha=settings.flowcon_alpha,
                            flowcon_beta=settings.flowcon_beta)
    sched = settings.scheduler_name

    app = FastAPI(title="SpeCon manager", version="1",
                  description="Scheduler extender and agent API of SpeCon (docs/manager.md).")
    app.state.cluster = state
    app.state.metrics = m
    app.state.settings = settings
    app.state.qos = book

    def agent_node(authorization: Annotated[str | None, Header()] = None) -> str:
        """The node named by the bearer token."""
        if not authorization or not authorization.startswith("Bearer "):
            m.heartbeats.labels("unauthenticated").inc()
            raise HTTPException(401, "missing bearer token",
                                headers={"WWW-Authenticate": "Bearer"})
        node = tokens.node_for(authorization[7:].strip())
        if node is None:
            m.heartbeats.labels("unauthenticated").inc()
            raise HTTPException(401, "unknown token", headers={"WWW-Authenticate": "Bearer"})
        return node

    AgentNode = Annotated[str, Depends(agent_node)]

    def check_node(token_node: str, claimed: str) -> None:
        if claimed != token_node:
            m.heartbeats.labels("forbidden").inc()
            raise HTTPException(403, f"this token speaks for node {token_node!r}, not for "
                                     f"{claimed!r}")
        if node_exists is not None and node_exists(claimed) is False:
            m.heartbeats.labels("unknown_node").inc()
            raise HTTPException(422, f"node {claimed!r} is not a node of this cluster")

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        if request.url.path.startswith(AGENT_PATHS):
            m.heartbeats.labels("invalid").inc()
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""),
                   "type": e.get("type", "")} for e in exc.errors()[:20]]
        return JSONResponse({"detail": errors}, status_code=422)

    @app.post("/v1/heartbeat", response_model=HeartbeatReply, tags=["agents"])
    async def heartbeat(hb: Heartbeat, node: AgentNode) -> HeartbeatReply:
        """An agent's report of its node and jobs; the reply carries the parameters and the
        checkpoint requests for migrations in flight."""
        check_node(node, hb.node)
        state.record(hb)
        m.heartbeats.labels("accepted").inc()
        reqs = state.checkpoint_requests(node)
        return HeartbeatReply(accepted=True, parameters=parameters,
                              checkpoint=[f"{r.namespace}/{r.pod}" for r in reqs],
                              checkpoint_requests=reqs)

    @app.post("/v1/reallocate", response_model=ReallocationReply, tags=["agents"])
    def reallocate(req: ReallocationRequest, node: AgentNode) -> ReallocationReply:
        """Algorithm 3's immediate request to move a converged job; decided at once."""
        check_node(node, req.node)
        if controller is None:
            reply = ReallocationReply(decision="refused",
                                      reason="migration is disabled on this manager")
        else:
            reply = controller.reallocate(node, req)
        m.reallocation_requests.labels(reply.decision).inc()
        return reply

    async def _args(request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            raise HTTPException(400, f"body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise HTTPException(400, "ExtenderArgs must be a JSON object")
        return body

    def _timed(verb: str, fn: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        try:
            out = fn()
        except BadRequest as exc:
            m.extender_requests.labels(verb, "bad_request").inc()
            raise HTTPException(400, str(exc)) from None
        m.extender_requests.labels(verb, "ok").inc()
        m.extender_seconds.labels(verb).observe(time.perf_counter() - start)
        return out

    extender_doc: dict[str, Any] = {"requestBody": {"required": True, "content": {
        "application/json": {"schema": ExtenderArgs.model_json_schema()}}}}

    @app.post("/filter", tags=["extender"], openapi_extra=extender_doc,
              responses={200: {"model": ExtenderFilterResult}})
    async def filter_(request: Request) -> Response:
        """kube-scheduler's filter call (ExtenderArgs -> ExtenderFilterResult)."""
        args = await _args(request)
        reply = _timed("filter", lambda: filter_nodes(state, args, sched, book))
        return Response(json.dumps(reply), media_type="application/json")

    @app.post("/prioritize", tags=["extender"], openapi_extra=extender_doc,
              responses={200: {"model": list[HostPriority]}})
    async def prioritize(request: Request) -> Response:
        """kube-scheduler's prioritize call (ExtenderArgs -> HostPriorityList, scores 0-10)."""
        args = await _args(request)
        reply = _timed("prioritize", lambda: prioritize_nodes(state, args, sched, book))
        return Response(json.dumps(reply), media_type="application/json")

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
    def healthz() -> str:
        return "ok"

    @app.get("/readyz", tags=["operations"], response_class=PlainTextResponse)
    def readyz() -> PlainTextResponse:
        if controller is not None and not controller.ready():
            return PlainTextResponse("restoring migrations in flight", status_code=503)
        return PlainTextResponse("ok")

    app.add_middleware(BodyLimit, agent_limit=settings.max_agent_body_bytes,
                       extender_limit=settings.max_extender_body_bytes,
                       on_refuse=m.bodies_refused.inc)
    app.include_router(status_router)
    return app
