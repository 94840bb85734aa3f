"""The manager's HTTP API (FastAPI): the routes of the scheduler extender, the agents'
heartbeat and reallocation endpoints, /metrics, /healthz and /readyz; OpenAPI at /docs and
/openapi.json when ``expose_docs`` is set.

The hot routes (``POST /v1/heartbeat``, ``/v1/heartbeats``, ``/filter``, ``/prioritize``) are
answered by :class:`~specon_manager.hot_routes.HotRoutes` before FastAPI sees the request
(:class:`ManagerApp`): the same handlers (:mod:`specon_manager.hot_calls`), without FastAPI's
routing, middleware, telemetry, dependency and response-model machinery per request
(docs/manager.md has the numbers that chose it). FastAPI still declares the three
request/response ones, for the OpenAPI description. What a request may be before a route
reads it is :mod:`specon_manager.request_limits`.

No ``from __future__ import annotations`` here: FastAPI must see the real annotations of the
routes, which name dependencies local to :func:`create_app`."""


import logging
from collections.abc import Callable
from typing import Annotated, Any, Protocol

import orjson
from fastapi import FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import Receive, Scope, Send

from specon.core.policy import lookup
from specon.core.scoring import Weights
from specon.wire import (
    Heartbeat,
    HeartbeatReply,
    Parameters,
    ReallocationReply,
    ReallocationRequest,
)
from specon_manager.auth import NodeTokens
from specon_manager.extender import ExtenderArgs, ExtenderFilterResult, HostPriority
from specon_manager.hot_calls import AgentAuth, Handlers, PodOnNode
from specon_manager.hot_routes import HotRoutes
from specon_manager.identity import StaticTokens
from specon_manager.intake import AGENT_PREFIX, NODE_KEY, Answer, RequestGate
from specon_manager.kube import FENCED, KubeError
from specon_manager.metrics import ManagerMetrics
from specon_manager.qos_book import QosBook
from specon_manager.request_limits import ListenerSplit, intake_for
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState
from specon_manager.status import router as status_router
from specon_manager.whatif_input import LossHistory
from specon_manager.whatif_input import router as whatif_router

log = logging.getLogger(__name__)

AGENT_PATHS = (AGENT_PREFIX,)


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

    intake = intake_for(settings, m, h.peek_names)
    app.add_middleware(RequestGate, intake=intake, authenticate=h.agent_node_async)
    if hot_routes:
        app.hot = HotRoutes(h, intake)
    if settings.extender_port:
        app.add_middleware(ListenerSplit, extender_port=settings.extender_port)
    if settings.expose_status:
        h.losses = LossHistory()
        app.include_router(status_router)
        app.include_router(whatif_router)
    return app
