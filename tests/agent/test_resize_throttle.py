"""The resize actuator waits out a 429 (the API server's priority and fairness shedding load)
for its Retry-After, a bounded number of times, as the manager's client does.

Fault injection, named as such: the real API server answers 429 only under overload, never on
demand, so ``ThrottlingApi``, a small HTTP server on a loopback socket, answers the first
``throttled`` requests 429 and the rest as the API server would for a pod and its resize."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest
from loopback import JsonHandler, serving

from specon.retry_after import RETRY_429, RETRY_AFTER_MAX_S, retry_after_s
from specon_agent.actuators.base import ActuatorError, CpuLimit
from specon_agent.actuators.resize import ResizeActuator

POD = {"metadata": {"name": "p", "namespace": "ns"},
       "spec": {"containers": [{"name": "main", "resources": {"limits": {"cpu": "2"}}}]},
       "status": {}}


class ThrottlingApi(ThreadingHTTPServer):
    throttled = 0
    retry_after = "0"
    seen: list[str]
    url = ""


class _Handler(JsonHandler):
    server: ThrottlingApi

    def _answer(self) -> None:
        self.server.seen.append(self.command)
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if len(self.server.seen) <= self.server.throttled:
            self.reply(429, b'{"kind":"Status","reason":"TooManyRequests","message":"slow down"}',
                       {"Retry-After": self.server.retry_after})
        else:
            self.reply(200, json.dumps(POD).encode())

    do_GET = do_PATCH = _answer


@pytest.fixture
def api() -> Iterator[ThrottlingApi]:
    srv = ThrottlingApi(("127.0.0.1", 0), _Handler)
    srv.seen = []
    with serving(srv) as url:
        srv.url = url
        yield srv


@pytest.fixture
def actuator(api: ThrottlingApi) -> Iterator[tuple[ResizeActuator, list[float]]]:
    act = ResizeActuator(4.0, api.url, timeout=5.0)
    waits: list[float] = []
    act.sleep = waits.append  # the waits are recorded, not slept
    act.register("c1", "ns", "p", "main")
    yield act, waits
    act.close()


def test_a_throttled_read_and_resize_are_sent_again_after_retry_after(
        api: ThrottlingApi, actuator: tuple[ResizeActuator, list[float]]) -> None:
    act, waits = actuator
    api.throttled, api.retry_after = 2, "3"
    assert act.read("c1").cores == 2.0
    assert api.seen == ["GET", "GET", "GET"]
    assert waits == [3.0, 3.0]
    api.seen, waits[:] = [], []
    api.throttled = 1
    act._write("c1", CpuLimit(200_000, 100_000), CpuLimit(100_000, 100_000))
    assert api.seen == ["GET", "GET", "PATCH"]  # the pod read throttled once, then the resize


def test_a_wait_is_at_most_the_clients_timeout(
        api: ThrottlingApi, actuator: tuple[ResizeActuator, list[float]]) -> None:
    act, waits = actuator
    api.throttled, api.retry_after = 1, "3600"
    act.read("c1")
    assert waits == [5.0]


def test_throttled_past_the_retries_is_an_error(
        api: ThrottlingApi, actuator: tuple[ResizeActuator, list[float]]) -> None:
    act, waits = actuator
    api.throttled = RETRY_429 + 1
    with pytest.raises(ActuatorError, match="429"):
        act.read("c1")
    assert len(api.seen) == RETRY_429 + 1 and len(waits) == RETRY_429


@pytest.mark.parametrize(("header", "cap", "wait"), [
    ("2", None, 2.0), (None, None, 1.0), ("Wed, 21 Oct 2026 07:28:00 GMT", None, 1.0),
    ("-5", None, 0.0), ("nan", None, 1.0), ("99", None, RETRY_AFTER_MAX_S), ("8", 0.5, 0.5)])
def test_retry_after_parsing(header: str | None, cap: float | None, wait: float) -> None:
    assert retry_after_s(header, cap) == wait
