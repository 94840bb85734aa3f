"""What the manager accepts of a request before any route reads it: which listener serves
which routes (:class:`ListenerSplit`), and the body intake's limits
(:mod:`specon_manager.intake`) as the settings set them, each refusal counted
(:func:`intake_for`)."""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from specon_manager.intake import (
    EXTENDER_PATHS,
    Answer,
    BodySlots,
    Intake,
    has_body,
    send_answer,
)
from specon_manager.intake import json_answer as _json
from specon_manager.metrics import ManagerMetrics
from specon_manager.settings import ManagerSettings


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


def intake_for(settings: ManagerSettings, m: ManagerMetrics,
               peek_extender: Callable[[str, bytes], Answer | None]) -> Intake:
    """The intake of the manager's routes, hot or not: its limits from ``settings``, each
    refused body counted in ``m``; ``peek_extender`` may refuse an extender body from its
    start (:meth:`specon_manager.hot_calls.Handlers.peek_names`)."""

    def refused(status: int) -> None:
        if status == 413:
            m.bodies_refused.inc()
        else:
            m.bodies_dropped.labels("timeout" if status == 408 else "busy").inc()

    return Intake(settings.max_agent_body_bytes, settings.max_extender_body_bytes,
                  settings.body_timeout_s, BodySlots(settings.max_unauthenticated_bodies),
                  trusted_port=settings.extender_port if settings.extender_client_ca_file
                  else 0, on_refuse=refused, peek_extender=peek_extender)
