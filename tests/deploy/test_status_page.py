"""The manager's status page (specon_manager/status.py) served by a real uvicorn: it shows what
the agents reported over the real API (workers, categories, jobs, extender calls), and headless
Chromium renders it (docs/status-page.png is that picture: SPECON_WRITE_SCREENSHOT=path keeps
it)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from planelib import free_port

from specon_manager.app import create_app
from specon_manager.auth import NodeTokens
from specon_manager.settings import ManagerSettings
from specon_manager.status import router

#: The research's worked example (docs/algorithms.md): Workers 1-3 with 3, 2, 2 active jobs and
#: Worker-4 with a converged job and 5 others.
WORKERS = {
    "worker-1": ["PC", "PC", "WC"],
    "worker-2": ["PC", "CC"],
    "worker-3": ["WC", "CC"],
    "worker-4": ["CC", "PC", "PC", "WC", "CC", "CC"],
}


def _token(node: str) -> str:
    return f"status-page-token-{node}"


@pytest.fixture
def manager() -> Iterator[str]:
    settings = ManagerSettings(kubernetes=False, host="127.0.0.1", port=free_port())
    tokens = NodeTokens({_token(n): n for n in WORKERS})
    app = create_app(settings, tokens=tokens)
    app.include_router(router)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=settings.port,
                                           log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{settings.port}"
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(10)


def _post(url: str, body: Any, token: str | None = None) -> None:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def _page(url: str) -> str:
    with urllib.request.urlopen(f"{url}/status", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/html")
        return str(resp.read().decode())


def _report(url: str) -> None:
    for i, (node, cats) in enumerate(WORKERS.items()):
        jobs = [{"namespace": "sweep", "pod": f"{node}-job-{k}", "category": c,
                 "loss": round(0.9 / (k + 1 + i), 4), "growth": 0.02 if c == "PC" else 0.001,
                 "limit": round(1 / len(cats), 3), "cpu_cores": round(2 / len(cats), 2),
                 "checkpointable": k % 2 == 0} for k, c in enumerate(cats)]
        # the agents measured their nodes' speeds, but worker-4's is of an older release
        speed = {"cpu_speed": 0.8 + 0.2 * i} if i < 3 else {}
        _post(f"{url}/v1/heartbeat", {"node": node, "time": time.time(), "seq": 1,
                                      "capacity_cpus": 8, "load_cores": 1.5 + i,
                                      "jobs": jobs, "actuator": "cgroup", **speed}, _token(node))
    args = {"Pod": {"metadata": {"name": "p", "namespace": "sweep",
                                 "labels": {"specon.io/training": "true"}}, "spec": {}},
            "NodeNames": list(WORKERS)}
    for _ in range(5):
        _post(f"{url}/filter", args)
        _post(f"{url}/prioritize", args)


def test_status_page_before_any_worker_reports(manager: str) -> None:
    page = _page(manager)
    assert "No worker has reported yet." in page
    assert "<b>0/0</b>workers fresh" in page


def test_status_page_shows_what_the_workers_reported(manager: str) -> None:
    _report(manager)
    page = _page(manager)
    assert "<b>4/4</b>workers fresh" in page
    assert f"<b>{sum(map(len, WORKERS.values()))}</b>training jobs" in page
    # Each worker's row: fresh, its CPUs, and its jobs per category (PC, WC, CC).
    for node, cats in WORKERS.items():
        counts = "".join(f"<td>{cats.count(c)}</td>" for c in ("PC", "WC", "CC"))
        assert f"<tr><td>{node}</td><td class=ok>fresh</td>" in page
        i = list(WORKERS).index(node)
        speed = f"{0.8 + 0.2 * i:.3g} (measured)" if i < 3 else "– (1 taken)"
        assert f"<td>8</td><td>{speed}</td>" in page
        assert counts + "<td>cgroup</td></tr>" in page
        for k in range(len(cats)):
            assert f"sweep/{node}-job-{k}" in page
    # The bar chart has one labelled bar per worker, and the extender's calls are counted.
    assert page.count('class="lbl">worker-') == len(WORKERS)
    assert "<tr><td>filter</td><td>5</td>" in page
    assert "<tr><td>prioritize</td><td>5</td>" in page


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.chromium
def test_headless_chromium_renders_the_status_page(manager: str, tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium); it only "
                    "makes the picture in docs/")
    _report(manager)
    shot = tmp_path / "status.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--no-first-run", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'ud'}",
                    "--window-size=1100,1250", f"--screenshot={shot}", f"{manager}/status"],
                   check=True, capture_output=True, timeout=120)
    data = shot.read_bytes()
    assert _png_size(data) == (1100, 1250)
    assert len(data) > 20_000  # a blank page compresses to a few KB
    keep = os.environ.get("SPECON_WRITE_SCREENSHOT")
    if keep:
        Path(keep).write_bytes(data)
