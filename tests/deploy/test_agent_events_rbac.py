"""The chart's agent ClusterRole is enough for the agent's limit Events, and nothing posts
without it (the real API server's RBAC; docs/agent.md, "Events")."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest
from deploylib import docs, one, render
from planelib import Plane

from specon_agent.events import CONTROLLER, LimitEvents, LimitNote, kube_sender

pytestmark = pytest.mark.plane


def post_as_the_agent(plane: Plane, ns: str, plane_bin: Path, home: Path, enabled: bool,
                      uid: str) -> Counter[str]:
    """One limit Event on pod ``ev`` in ``ns``, as a service account holding exactly the
    rendered agent ClusterRole; the poster's outcome counts."""
    objs = docs(render(plane_bin, home, {"agent.actuator": "resize",
                                         "agent.events.enabled": enabled}))
    rules = one(objs, "ClusterRole", "specon-agent")["rules"]
    account = f"agent-{uuid.uuid4().hex[:6]}"
    kubeconfig = plane.service_account_kubeconfig(ns, account, cluster_rules=rules)
    counts: Counter[str] = Counter()
    events = LimitEvents(kube_sender(plane.api_client(kubeconfig)), "node-rbac", window_s=0,
                         count=lambda o: counts.update([o]))
    events.offer(LimitNote(ns, "ev", uid, "main", 2.0, 1.0, category="WC"))
    events.close()
    return counts


def test_the_agent_role_posts_limit_events_and_only_when_enabled(
    plane: Plane, plane_namespace: str, plane_bin: Path, tmp_path: Path
) -> None:
    ns = plane_namespace
    plane.kubectl("run", "ev", "-n", ns, "--image=x", "--restart=Never")
    uid = plane.kubectl("get", "pod", "-n", ns, "ev", "-o", "jsonpath={.metadata.uid}").stdout
    assert post_as_the_agent(plane, ns, plane_bin, tmp_path, False, uid) == {"failed": 1}
    assert post_as_the_agent(plane, ns, plane_bin, tmp_path, True, uid) == {"posted": 1}
    out = plane.kubectl("get", "events.v1.events.k8s.io", "-n", ns, "-o", "json").stdout
    [event] = [e for e in json.loads(out)["items"] if e.get("reportingController") == CONTROLLER]
    assert event["regarding"]["uid"] == uid and event["reason"] == "CPULimitLowered"
