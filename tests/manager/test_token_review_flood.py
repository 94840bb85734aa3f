"""Issue 29, item 7: crafted tokens (JWT-shaped, unexpired, for the manager's audience: what
anyone can make) sent to every agent path of the real app under uvicorn. ``/v1/reallocate``
reviewed each one on FastAPI's thread pool, beside the 4-at-a-time limiter of the other paths
(10,000 tokens: 10,001 TokenReviews). Now every path goes through one limiter: at most 4
reviews at a time, a ceiling per second, one review per token at a time, a refused token
remembered.

FAULT-INJECTION FAKE: the TokenReview endpoint here is a function that counts its calls and
how many run at once; the real API server is not available to a unit test (it runs in the
``plane`` tests, tests/manager/test_agent_identity_plane.py, which reviews real tokens)."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from servelib import serve

from specon_manager.app import create_app
from specon_manager.identity import TokenReviewer
from specon_manager.review_limit import ReviewLimiter
from specon_manager.settings import ManagerSettings

AUDIENCE = "specon-manager"
AGENT_SA = "specon-system:specon-agent"
RATE = 20.0  # reviews a second allowed in this test (burst: twice as many)
FLOOD = 1500
PATHS = ("/v1/reallocate", "/v1/heartbeat", "/v1/heartbeats")


def crafted(sub: str) -> str:
    """A JWT-shaped token anyone can make: right audience, not expired, unsigned."""
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    return ".".join([part({"alg": "RS256"}), part({"aud": [AUDIENCE], "sub": sub,
                                                   "exp": int(time.time()) + 3600}), "sig"])


GOOD = crafted("the-real-agent")


class FakeTokenReview:
    """Fault-injection fake of the API server's TokenReview endpoint (see the module doc):
    refuses every token but GOOD (node-1's agent); counts calls and concurrency."""

    def __init__(self) -> None:
        self.calls = 0
        self.running = 0
        self.most = 0
        self.delay_s = 0.01  # an API server round trip
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.calls += 1
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(self.delay_s)
        with self._lock:
            self.running -= 1
        if body["spec"]["token"] != GOOD:
            return {"status": {"authenticated": False, "error": "invalid bearer token"}}
        return {"status": {"authenticated": True, "audiences": [AUDIENCE], "user": {
            "username": f"system:serviceaccount:{AGENT_SA}",
            "extra": {"authentication.kubernetes.io/node-name": ["node-1"]}}}}


def post(c: httpx.Client, path: str, token: str) -> int:
    body = {"node": "node-1", "namespace": "default", "pod": "p", "time": time.time()}
    if path != "/v1/reallocate":
        body = {"node": "node-1", "time": time.time(), "seq": 1, "capacity_cpus": 4,
                "load_cores": 0, "jobs": []}
    content = json.dumps(body).encode() + (b"\n" if path == "/v1/heartbeats" else b"")
    return c.post(path, content=content, headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": "application/json"}).status_code


@pytest.mark.timeout(300)
def test_a_flood_of_crafted_tokens_costs_a_bounded_number_of_reviews() -> None:
    fake = FakeTokenReview()
    reviewer = TokenReviewer(fake, lambda path: None, AUDIENCE, [AGENT_SA],
                             limits=ReviewLimiter(per_s=RATE))
    app = create_app(ManagerSettings(kubernetes=False), auth=reviewer)
    with serve(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        # One refused token asked 40 times at once on every path: reviewed once.
        same = crafted("same")
        fake.delay_s = 0.2  # a slow API server: the others ask while the first is reviewed
        with ThreadPoolExecutor(16) as pool:
            codes = list(pool.map(lambda i: post(c, PATHS[i % 3], same), range(40)))
        assert set(codes) == {401}, codes
        assert fake.calls == 1
        fake.delay_s = 0.01

        start = time.monotonic()
        tokens = [(PATHS[i % 3], crafted(uuid.uuid4().hex)) for i in range(FLOOD)]
        with ThreadPoolExecutor(32) as pool:
            codes = list(pool.map(lambda pt: post(c, *pt), tokens))
        took = time.monotonic() - start
        assert set(codes) <= {401, 503}, sorted(set(codes))
        ceiling = 2 * RATE + RATE * took + 1
        assert fake.calls <= ceiling, (
            f"{fake.calls} TokenReviews for {FLOOD} crafted tokens in {took:.1f} s "
            f"(ceiling {ceiling:.0f})")
        assert fake.most <= 4, f"{fake.most} TokenReviews ran at once"

        # A refused token is remembered: asked again, not reviewed again.
        before = fake.calls
        assert post(c, "/v1/reallocate", same) == 401 and fake.calls == before
        # The real agent is served once the bucket has refilled (the flood is over).
        time.sleep(2 / RATE)
        assert post(c, "/v1/reallocate", GOOD) == 200
        assert post(c, "/v1/heartbeat", GOOD) == 200
