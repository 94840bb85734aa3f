"""The agent's own cost: CPU and memory of `specon-agent` following N containers on one node.

Starts N light containers (a shell loop printing a falling `loss=` line every second) labelled
for the agent, runs `specon-agent` in standalone mode with the Docker actuator, waits until it
follows all of them, then measures over a window: the agent's CPU time (from /proc, user +
system, all threads), its resident memory (peak and at the end), and its loop timings (from its
/metrics). Containers are removed at the end.

Usage: python benchmarks/agent_overhead.py [--containers 50] [--window 60] [--interval 10]
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
LOOP = ('i=0; while true; do i=$((i+1)); echo "step $i loss=$((100000 / (i + 10)))"; '
        'sleep 1; done')


def image() -> str:
    return os.environ.get("SPECON_BASE_IMAGE") or (
        "specon-base:" + (ROOT / "hack/images/base-tag").read_text().strip())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    get = lambda key: int(re.search(rf"^{key}:\s+(\d+)", status, re.M).group(1)) / 1024  # noqa: E731
    return get("VmRSS"), get("VmHWM")


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return str(r.read().decode())


def value(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        m = re.match(r"^([a-zA-Z_:]+)(\{.*\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--containers", type=int, default=50)
    ap.add_argument("--window", type=float, default=60.0, help="measurement window (s)")
    ap.add_argument("--interval", type=float, default=10.0, help="agent interval (s)")
    args = ap.parse_args()
    client = docker.from_env()
    label = f"specon.bench/overhead-{secrets.token_hex(4)}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    made = []
    agent = None
    try:
        print(f"starting {args.containers} containers ...", file=sys.stderr, flush=True)
        for _ in range(args.containers):
            made.append(client.containers.run(
                image(), ["sh", "-c", LOOP], detach=True, network_mode="none",
                labels={label: "true"}, cpu_period=100_000, cpu_quota=20_000))
        agent = subprocess.Popen(
            [sys.executable, "-m", "specon_agent", "--label", label, "--metrics-port", str(port),
             "--metrics-address", "127.0.0.1", "--interval-s", str(args.interval),
             "--alpha", "0.05", "--flowcon-alpha", "0.05", "--flowcon-beta", "2",
             "--log-level", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        deadline = time.monotonic() + 120
        while True:
            try:
                text = metrics(port)
                followed = sum(value(text, "specon_agent_jobs", category=c)
                               for c in ("PC", "WC", "CC"))
                if followed >= args.containers:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the agent did not follow every container within 120 s")
            time.sleep(1)
        startup_rss = rss_mb(agent.pid)[0]
        c0, t0 = cpu_seconds(agent.pid), time.monotonic()
        before = metrics(port)
        time.sleep(args.window)
        c1, t1 = cpu_seconds(agent.pid), time.monotonic()
        after = metrics(port)
        rss, peak = rss_mb(agent.pid)
        cores = (c1 - c0) / (t1 - t0)

        def hist(phase: str, text: str) -> tuple[float, float]:
            return (value(text, "specon_agent_loop_duration_seconds_sum", phase=phase),
                    value(text, "specon_agent_loop_duration_seconds_count", phase=phase))

        print(f"containers followed: {args.containers}; window {t1 - t0:.0f} s; interval "
              f"{args.interval:g} s; poll 2 s; host load {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs")
        print(f"agent CPU: {cores * 100:.2f}% of one core ({cores * 1000:.1f} millicores)")
        print(f"agent memory: RSS {rss:.1f} MiB (after discovery {startup_rss:.1f} MiB), "
              f"peak {peak:.1f} MiB")
        for phase in ("poll", "flowcon", "categorize"):
            s0, n0 = hist(phase, before)
            s1, n1 = hist(phase, after)
            if n1 > n0:
                print(f"loop phase {phase}: {n1 - n0:.0f} passes, mean "
                      f"{1000 * (s1 - s0) / (n1 - n0):.1f} ms")
        writes = value(after, "specon_agent_limit_writes_total")
        read = (value(after, "specon_agent_log_read_bytes_total")
                - value(before, "specon_agent_log_read_bytes_total"))
        print(f"limit writes so far: {writes:.0f}; log bytes read in the window: {read:.0f}")
    finally:
        if agent is not None:
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=60)
        for c in made:
            c.remove(force=True)


if __name__ == "__main__":
    main()
