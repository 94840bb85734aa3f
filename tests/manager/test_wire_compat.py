"""Manager and agents of adjacent releases interoperate (issue 18): the previous release's wire
samples (``fixtures/wire-0.1``, written by release 0.1's models) against this code's manager
under a real uvicorn and this code's agent link; and a newer peer's messages (added fields, a
minor protocol version) accepted, another major version refused with a message that says what
to do (docs/upgrades.md)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from loopback import JsonHandler
from managerlib import TOKENS, auth, serve
from pydantic import BaseModel

from specon.wire import (
    Heartbeat,
    HeartbeatReply,
    ReallocationReply,
    ReallocationRequest,
)
from specon_agent.link import ManagerLink
from specon_manager.app import create_app
from specon_manager.auth import NodeTokens
from specon_manager.settings import ManagerSettings

SAMPLES = Path(__file__).parent / "fixtures" / "wire-0.1"
MODELS = {"heartbeat": Heartbeat, "reallocation-request": ReallocationRequest,
          "heartbeat-reply": HeartbeatReply, "reallocation-reply": ReallocationReply}


def sample(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((SAMPLES / f"{name}.json").read_text())
    return doc


def newer(doc: Any) -> Any:
    """``doc`` as a later release might send it: a field added at every level."""
    if isinstance(doc, dict):
        out = {k: newer(v) for k, v in doc.items()}
        out["added_in_a_later_release"] = {"any": ["shape", 1, None]}
        if "protocol" in out:
            out["protocol"] = "specon/v1.7"
        return out
    if isinstance(doc, list):
        return [newer(v) for v in doc]
    return doc


def as_sent_then(model: BaseModel, doc: Any) -> Any:
    """``model`` dumped with only the fields ``doc`` (an older release's message) has; every
    field added since must hold its default there (what the old peer assumed, docs/upgrades.md)."""
    dumped = model.model_dump(mode="json")
    for key in dumped.keys() - doc.keys():
        default = type(model).model_fields[key].get_default(call_default_factory=True)
        assert dumped[key] == default, f"{key}: added since, yet not its default"
    out = {}
    for key, value in doc.items():
        sub = getattr(model, key)
        if isinstance(sub, BaseModel):
            out[key] = as_sent_then(sub, value)
        elif isinstance(sub, list) and sub and isinstance(sub[0], BaseModel):
            out[key] = [as_sent_then(m, d) for m, d in zip(sub, value, strict=True)]
        else:
            out[key] = dumped[key]
    return out


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_previous_releases_samples_read_the_same(name: str) -> None:
    doc = sample(name)
    model = MODELS[name].model_validate(doc)
    # nothing lost, nothing reinterpreted; fields added since hold their defaults
    assert as_sent_then(model, doc) == doc


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_newer_peers_messages_are_read_without_their_additions(name: str) -> None:
    model = MODELS[name].model_validate(newer(sample(name)))
    assert "added_in_a_later_release" not in json.dumps(model.model_dump(mode="json"))
    dumped = as_sent_then(model, sample(name))
    assert {k: v for k, v in dumped.items() if k != "protocol"} == {
        k: v for k, v in sample(name).items() if k != "protocol"}


@pytest.mark.parametrize("version", ["specon/v2", "specon/v2.0", "specon/v1.x", "v1", ""])
def test_another_major_version_is_refused_with_what_to_do(version: str) -> None:
    with pytest.raises(ValueError, match=r"docs/upgrades\.md"):
        Heartbeat.model_validate({**sample("heartbeat"), "protocol": version})


@pytest.fixture
def manager() -> Iterator[str]:
    app = create_app(ManagerSettings(kubernetes=False), tokens=NodeTokens(TOKENS))
    with serve(app) as url:
        yield url


def fresh(doc: dict[str, Any], node: str) -> dict[str, Any]:
    return {**doc, "node": node, "time": time.time()}


def test_the_manager_takes_the_previous_and_the_next_releases_heartbeats(manager: str) -> None:
    old = fresh(sample("heartbeat"), "node-1")
    r = httpx.post(f"{manager}/v1/heartbeat", json=old, headers=auth("node-1"))
    assert r.status_code == 200 and r.json()["accepted"] is True, r.text
    # its answer is what the previous release's agent reads (its models refused unknown keys)
    assert set(r.json()) <= set(sample("heartbeat-reply"))
    HeartbeatReply.model_validate(r.json())
    nxt = fresh(newer(sample("heartbeat")), "node-2")
    nxt["seq"] = 43
    r = httpx.post(f"{manager}/v1/heartbeat", json=nxt, headers=auth("node-2"))
    assert r.status_code == 200 and r.json()["accepted"] is True, r.text
    r = httpx.post(f"{manager}/v1/heartbeat", json={**old, "protocol": "specon/v2", "seq": 50},
                   headers=auth("node-1"))
    assert r.status_code == 422 and "docs/upgrades.md" in r.text, r.text


class NewerManager(JsonHandler):
    """A manager of a later release, as far as the agent can tell: it answers with an added
    field at every level of its replies."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.reply(200, json.dumps(newer(sample("heartbeat-reply"))).encode())


def test_the_agent_reads_a_newer_managers_replies() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), NewerManager)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    replies: list[HeartbeatReply] = []
    outcomes: list[tuple[str, str]] = []
    link = ManagerLink(f"http://127.0.0.1:{server.server_address[1]}", None,
                       on_reply=replies.append, on_outcome=lambda k, o: outcomes.append((k, o)))
    try:
        assert link._send_heartbeat(Heartbeat.model_validate(sample("heartbeat")))
        (reply,) = replies
        assert reply.checkpoint_requests[0].id == "m-1a2b3c"
        assert ("heartbeat", "bad_reply") not in outcomes
    finally:
        link._http.close()
        server.shutdown()
        server.server_close()


def test_the_managers_own_mark_on_a_reply_is_never_sent() -> None:
    # ``observed`` (observe mode's would-be move) is for the manager's rebalancer alone: a 0.1
    # agent refuses unknown keys, so the reply it reads is 0.1's shape.
    reply = ReallocationReply(decision="stay", target="real-1", migrated=True, observed=True,
                              reason="observe mode: would migrate to real-2; not moved")
    assert set(json.loads(reply.model_dump_json())) == set(sample("reallocation-reply"))
    assert set(reply.model_dump(mode="json")) == set(sample("reallocation-reply"))
