"""SIGTERM to the real ``specon-manager`` process with an agent's heartbeat stream open: the
stream ends with a 503 line (the agent opens its next one, which reaches the next leader) and
the process exits. Before, the shutdown waited for the stream, which never ends by itself,
until the kubelet's SIGKILL: the leader then never handed over its migrations
(specon_manager/shutdown_handover.py) nor released its Lease."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from planelib import free_port
from servelib import stop_process

REPO = Path(__file__).resolve().parents[2]
TOKEN = "tok-shutdown-0123456789abcdef"


def test_sigterm_ends_the_open_heartbeat_streams_and_the_process_exits(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN} node-1\n")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPECON_MANAGER_KUBERNETES": "false",
           "SPECON_MANAGER_HOST": "127.0.0.1", "SPECON_MANAGER_PORT": str(port),
           "SPECON_MANAGER_TOKENS_FILE": str(tokens), "SPECON_MANAGER_LOG_LEVEL": "warning"}
    proc = subprocess.Popen([sys.executable, "-m", "specon_manager"], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "manager did not start"
            time.sleep(0.2)
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(f"POST /v1/heartbeats HTTP/1.1\r\nHost: m\r\nAuthorization: Bearer {TOKEN}\r\n"
                  "Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
                  .encode())
        hb = json.dumps({"node": "node-1", "time": time.time(), "seq": 1,
                         "capacity_cpus": 4, "load_cores": 0, "jobs": []}).encode() + b"\n"
        s.sendall(f"{len(hb):x}\r\n".encode() + hb + b"\r\n")
        got = b""
        while b'"status":200' not in got:
            got += s.recv(65536)
        proc.send_signal(signal.SIGTERM)  # the stream stays open: the agent sends no end
        assert proc.wait(30) == 0
        while chunk := s.recv(65536):
            got += chunk
        s.close()
        assert b'"status":503' in got and b"shutting down" in got, got[-300:]
    finally:
        stop_process(proc)
