"""The manager's Events go through events.k8s.io/v1 (issue 31: core/v1's Event fields are
deprecated): the body has the new API's fields only and passes the checks the API server makes
on an events.k8s.io/v1 create (k8s.io/kubernetes pkg/apis/core/validation/events.go), both for
the migration controller's events and for the QoS warning. The plane tests
(test_manager_plane, test_qos_plane, test_kubeflow_plane, test_kueue_plane) read them back from
/apis/events.k8s.io/v1 on the real API server."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client import EventsV1Event, V1ObjectReference

from specon_manager.kube import EVENT_CONTROLLER, event_body, events_path
from specon_manager.service import _warning_sender

SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED = re.compile(r"([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def assert_valid_v1_event(body: dict[str, Any]) -> None:
    """What the API server checks on a create through events.k8s.io/v1."""
    assert body["apiVersion"] == "events.k8s.io/v1" and body["kind"] == "Event"
    assert set(body) <= set(EventsV1Event.attribute_map.values()), body
    assert set(body["regarding"]) <= set(V1ObjectReference.attribute_map.values())
    # strict validation: no deprecated fields, a type, an eventTime
    assert not {k for k in body if k.startswith("deprecated")}
    assert body["type"] in ("Normal", "Warning")
    assert MICRO_TIME.fullmatch(body["eventTime"]), body["eventTime"]
    name = body["metadata"]["name"]
    assert len(name) <= 253 and SUBDOMAIN.fullmatch(name), name
    assert "generateName" not in body["metadata"]
    # legacy validation with eventTime set
    assert body["regarding"]["namespace"] == body["metadata"]["namespace"]
    assert QUALIFIED.fullmatch(body["reportingController"])
    assert 0 < len(body["reportingInstance"]) <= 128
    assert 0 < len(body["action"]) <= 128 and 0 < len(body["reason"]) <= 128
    assert len(body["note"].encode()) <= 1024


def pod(name: str = "train-1") -> dict[str, Any]:
    return {"apiVersion": "v1", "metadata": {"name": name, "namespace": "team-a", "uid": "u-1"}}


def test_an_event_has_the_events_api_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "specon-manager-7d9f")
    before = datetime.now(UTC)
    body = event_body(pod(), "MigrationStarted", "moving to node-2", action="Migrate")
    assert_valid_v1_event(body)
    assert body["regarding"] == {"apiVersion": "v1", "kind": "Pod", "name": "train-1",
                                 "namespace": "team-a", "uid": "u-1"}
    assert (body["reason"], body["note"], body["type"], body["action"]) == (
        "MigrationStarted", "moving to node-2", "Normal", "Migrate")
    assert body["reportingController"] == EVENT_CONTROLLER == "specon-manager"
    assert body["reportingInstance"] == "specon-manager-7d9f"
    assert body["metadata"]["name"].startswith("train-1.")
    when = datetime.fromisoformat(body["eventTime"].replace("Z", "+00:00"))
    assert before.replace(microsecond=0) <= when <= datetime.now(UTC)
    for old in ("involvedObject", "message", "source", "firstTimestamp", "lastTimestamp",
                "count", "reportingComponent"):
        assert old not in body
    assert events_path("team-a") == "/apis/events.k8s.io/v1/namespaces/team-a/events"


def test_limits_a_long_name_note_and_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "m" * 300)
    # 253 characters with a dash where the name is cut for the time stamp
    name = "a" * 235 + "-" + "b" * 17
    body = event_body(pod(name), "MigrationFailed", "é" * 3000, action="Migrate",
                      kind="Pod", warning=True)
    assert_valid_v1_event(body)
    assert body["type"] == "Warning"
    assert body["note"] == "é" * 512  # 1 KiB, cut between characters
    assert body["reportingInstance"] == "m" * 128
    assert body["regarding"]["name"] == name  # the object keeps its full name


def test_two_events_on_one_object_have_two_names() -> None:
    a = event_body(pod(), "CheckpointRequested", "x", action="Migrate")
    time.sleep(0.001)
    b = event_body(pod(), "CheckpointVerified", "y", action="Migrate")
    assert a["metadata"]["name"] != b["metadata"]["name"]


class _Kube:
    def __init__(self, pods: dict[str, dict[str, Any]]) -> None:
        self.pods = pods
        self.created: list[tuple[str, dict[str, Any]]] = []

    def get(self, path: str) -> dict[str, Any] | None:
        return self.pods.get(path)

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append((path, body))
        return body


def test_the_qos_warning_goes_through_the_events_api() -> None:
    real = pod()
    kube = _Kube({"/api/v1/namespaces/team-a/pods/train-1": real})
    send = _warning_sender(kube)  # type: ignore[arg-type]
    send(real, "InvalidQoS", "specon.io/deadline: 'tomorrow' is not a time")
    [(path, body)] = kube.created
    assert path == "/apis/events.k8s.io/v1/namespaces/team-a/events"
    assert_valid_v1_event(body)
    assert (body["reason"], body["type"], body["action"]) == ("InvalidQoS", "Warning",
                                                              "ValidateQoS")
    assert body["regarding"]["uid"] == "u-1" and "tomorrow" in body["note"]
