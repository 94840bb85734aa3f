"""The hot calls' handlers (:class:`Handlers`): an agent's heartbeat and token, and
kube-scheduler's filter and prioritize, as bytes in and :class:`~specon_manager.intake.Answer`
out. One implementation, called by the hot routes (:mod:`specon_manager.hot_routes`) and by
the FastAPI routes (:mod:`specon_manager.app`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
import orjson
from pydantic import ValidationError

from specon.wire import Heartbeat, HeartbeatReply, JobReport, Parameters
from specon_manager.extender import (
    BadRequest,
    TooManyNodes,
    check_node_count,
    filter_nodes,
    names_over,
    prioritize_nodes,
)
from specon_manager.extender_observe import observed_filter, observed_prioritize
from specon_manager.heartbeat_order import skew_reason
from specon_manager.identity import MAX_TOKEN_BYTES, Refusal, StaticTokens, TokenReviewer
from specon_manager.intake import Answer
from specon_manager.intake import json_answer as _json
from specon_manager.metrics import ManagerMetrics
from specon_manager.qos_book import QosBook
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState
from specon_manager.whatif_input import LossHistory

log = logging.getLogger(__name__)

#: Extender bodies larger than this are decoded and answered on a worker thread, one at a
#: time, so that a large body never holds the event loop (heartbeats keep flowing).
INLINE_BODY_BYTES = 256 * 1024
#: ``pod_on_node(namespace, pod, uid, node)``: is this pod (by UID) on this node, from the
#: manager's pod cache? None: cannot tell (no cache), and the job is kept.
PodOnNode = Callable[[str, str, str, str], bool | None]
#: Who an agent is: a static ``TOKEN NODE`` file, or TokenReview of projected tokens.
AgentAuth = StaticTokens | TokenReviewer

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


class Handlers:
    """The agents' and the scheduler's hot calls, as bytes in and :class:`Answer` out: shared by
    :class:`specon_manager.hot_routes.HotRoutes` and the FastAPI routes (one
    implementation)."""

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
        #: Each job's recent losses, for ``/status/whatif-input`` (None: not served).
        self.losses: LossHistory | None = None
        # TokenReviews (a token not yet in the cache) run on worker threads, a few at a time,
        # so that a flood of unknown tokens neither blocks the event loop nor the API server.
        self.reviews = anyio.CapacityLimiter(4)
        self.sched = settings.scheduler_name
        self.observing = settings.enforcement == "observe"
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
        if recorded and self.losses is not None:
            self.losses.add(kept)
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
        """A heartbeat's answer as a line of the stream
        (:meth:`specon_manager.hot_routes.HotRoutes.stream`)."""
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
            if self.observing:  # answered neutrally; the would-be answer recorded
                out = Answer(200, orjson.dumps(observed_filter(
                    self.state, args, self.sched, self.book)) if verb == "filter" else
                    observed_prioritize(self.state, args, self.sched, self.m, self.book))
            elif verb == "filter":
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
