"""``specon whatif`` against a real manager under uvicorn on loopback, fed real heartbeats: the
``/status/whatif-input`` it reads (with each job's recent losses), the predicted gain it prints,
and its exit codes (1: the manager cannot be asked; 2: a reply it cannot read, naming the
field)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from managerlib import TOKENS, auth, heartbeat, job, serve
from planelib import free_port

from specon.core.policy import SHIPPED
from specon_manager.app import create_app
from specon_manager.auth import NodeTokens
from specon_manager.settings import ManagerSettings

REPO = Path(__file__).resolve().parents[2]
#: What the manager's planner charges a move until the job's own is measured, as shipped.
MOVE_COST_S = ManagerSettings.model_fields["migration_cost_s"].default


def specon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specon", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=300)


def _jobs(round_: int) -> dict[str, list[dict[str, Any]]]:
    """Three nodes' jobs at heartbeat ``round_``: steps move on, losses fall."""
    out: dict[str, list[dict[str, Any]]] = {"node-1": [], "node-2": [], "node-3": []}
    for i in range(6):
        step = 40 * (round_ + 1) * (1 + i % 3)
        total = 2000 if i % 2 == 0 else None  # half declare their total steps
        done = 0.05 * step * (1 + i)
        out["node-1" if i < 4 else "node-2"].append(job(
            f"train-{i}", "PC", namespace="ml", uid=f"uid-{i}", step=step,
            loss=2.0 * math.exp(-step / (300 * (1 + i))) + 0.05, work_done_s=done,
            work_s=done * ((total - step) / step if total else 1.0), total_steps=total,
            cpu_cores=1.0, limit=0.5, checkpointable=i != 5, created=1_700_000_000.0))
    return out


@pytest.fixture
def manager() -> Iterator[str]:
    app = create_app(ManagerSettings(kubernetes=False, heartbeat_interval_s=10),
                     tokens=NodeTokens(TOKENS))
    with serve(app) as url:
        for round_ in range(8):
            for node, jobs in _jobs(round_).items():
                r = httpx.post(f"{url}/v1/heartbeat", headers=auth(node),
                               json=heartbeat(node, jobs, seq=round_ + 1, cpus=4.0))
                assert r.status_code == 200 and r.json()["accepted"], r.text
        yield url


def test_the_manager_serves_each_jobs_progress_and_recent_losses(manager: str) -> None:
    got = httpx.get(f"{manager}/status/whatif-input").json()
    assert got["format"] == "specon-whatif-input/v1"
    assert [(n["name"], n["cpus"]) for n in got["nodes"]] == [
        ("node-1", 4.0), ("node-2", 4.0), ("node-3", 4.0)]
    by = {j["pod"]: j for j in got["jobs"]}
    assert sorted(by) == [f"train-{i}" for i in range(6)]
    j0 = by["train-0"]
    assert (j0["node"], j0["step"], j0["total_steps"], j0["created"]) == (
        "node-1", 320, 2000, 1_700_000_000.0)
    assert j0["limit_cores"] == 2.0 and j0["cpu_cores"] == 1.0
    assert [s for s, _ in j0["losses"]] == [40 * r for r in range(1, 9)]  # one per heartbeat
    assert by["train-1"]["total_steps"] is None
    assert got["move_cost_s"] == MOVE_COST_S  # what the planner charges a move


def test_whatif_prints_the_predicted_gain_of_the_shipped_policy(manager: str) -> None:
    r = specon("whatif", "--manager-url", manager, "--seeds", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["jobs"] == 6 and out["seeds"] == [0] and out["shipped"] == SHIPPED
    assert set(out["policies"]) == {"default", SHIPPED}
    for p in out["policies"].values():
        assert p["avg_completion_s"] > 0 and p["makespan_s"] >= p["avg_completion_s"]
    base, mine = out["policies"]["default"], out["policies"][SHIPPED]
    # one seed: the paired change is the change of the means
    assert out["gain_pct"]["avg_completion_s"] == pytest.approx(
        100 * (1 - mine["avg_completion_s"] / base["avg_completion_s"]), abs=0.05)
    said = "\n".join(out["notes"])
    assert "3 job(s) declare no total steps" in said
    assert f"a move {MOVE_COST_S:g} s in all" in said
    table = specon("whatif", "--manager-url", manager, "--seeds", "2")
    assert table.returncode == 0, table.stderr
    assert "predicted gain" in table.stdout and "6 live job(s)" in table.stdout
    assert "declare no total steps" in table.stderr


def test_a_manager_that_cannot_be_asked_is_exit_1() -> None:
    nothing = f"http://127.0.0.1:{free_port()}"
    r = specon("whatif", "--manager-url", nothing)
    assert r.returncode == 1 and "cannot be reached" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    hidden = create_app(ManagerSettings(kubernetes=False, expose_status=False))
    with serve(hidden) as url:
        r = specon("whatif", "--manager-url", url)
    assert r.returncode == 1 and "HTTP 404" in r.stderr and "expose_status" in r.stderr


class _WrongReply(BaseHTTPRequestHandler):
    """A fake manager, to inject a reply no real one sends: a job without a node."""

    def do_GET(self) -> None:
        body = json.dumps({"format": "specon-whatif-input/v1", "time": 1.0, "nodes": [],
                           "jobs": [{"namespace": "ml", "pod": "p"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_reply_it_cannot_read_is_exit_2_naming_the_field() -> None:
    server = HTTPServer(("127.0.0.1", 0), _WrongReply)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        r = specon("whatif", "--manager-url", f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()
    assert r.returncode == 2, r.stderr
    assert "jobs.0.node: Field required" in r.stderr
    assert specon("whatif", "--seeds", "0").returncode == 2
