"""The thread hint's effect on the real Docker Engine (docs/examples.md, "Threads that follow
the limit").

One real training container at a time (`specon_examples cnn`, started with `--threads T`,
its checkpoint directory and progress file on a bind mount). The agent's own code path (an
in-process `Agent` with the Docker actuator) then holds it to a CPU limit below its thread count
(`--limit` cores, a QoS override) and, when the job has a checkpoint directory, writes the
thread hint there. Three variants, interleaved in each repeat:

- `hint`: T threads at start, the agent writes threads.json, the SDK applies it;
- `no-hint`: the same, but the agent sees no checkpoint directory, so no hint is written and
  the job keeps T threads under the quota;
- `1-thread`: started with the hint's count (`threads_for_limit`), the reference.

Each variant trains for `--warmup` s after the limit is set, then its rate (steps/s, from
its progress records) and its CPU use (cores, the engine's stats) are measured over
`--window` s. The report gives each variant's median and range over the repeats, the
per-repeat ratio against `no-hint`, and steps per CPU-second.

Usage: python benchmarks/thread_hint.py [--threads 4] [--limit 1] [--repeats 3]
       [--warmup 15] [--window 30]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import docker
from docker.models.containers import Container

from specon.core.threads import threads_for_limit
from specon_agent.actuators.docker import DockerActuator
from specon_agent.agent import Agent
from specon_agent.cpu import CpuMeter
from specon_agent.discovery import Arrived, DockerDiscovery
from specon_agent.loop_config import LoopConfig

ROOT = Path(__file__).resolve().parents[1]
LABEL = {"org.specon.test.kind": "benchmark"}  # its containers are removed in a finally


def image() -> str:
    return os.environ.get("SPECON_BASE_IMAGE") or (
        "specon-base:" + (ROOT / "hack/images/base-tag").read_text().strip())


def records(path: Path, event: str) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue  # the line being written
        if r.get("event") == event:
            out.append(r)
    return out


def rate(path: Path, since: float, until: float) -> float:
    pts = [(r["time"], r["step"]) for r in records(path, "progress") if since <= r["time"] <= until]
    if len(pts) < 2:
        raise RuntimeError(f"too few progress records in the window ({len(pts)}) in {path}")
    (t0, s0), (t1, s1) = pts[0], pts[-1]
    return (s1 - s0) / (t1 - t0)


def cpu_ns(container: Container) -> int:
    """The container's CPU time so far (the engine's stats, cgroup usage)."""
    stats = container.stats(stream=False)
    return int(stats["cpu_stats"]["cpu_usage"]["total_usage"])


def run_variant(engine: docker.DockerClient, node_cpus: float, variant: str, threads: int,
                limit: float, warmup: float, window: float
                ) -> tuple[float, float, list[int]]:
    label = f"specon.bench/hint-{secrets.token_hex(4)}"
    start_threads = threads_for_limit(limit, node_cpus) if variant == "1-thread" else threads
    with tempfile.TemporaryDirectory() as tmp:
        shared = Path(tmp)
        progress = shared / "progress.jsonl"
        container = engine.containers.run(
            image(),
            ["python3", "-m", "specon_examples", "cnn", "--iterations", "1000000",
             "--threads", str(start_threads), "--log-every", "2"],
            detach=True, network_mode="none", working_dir="/src",
            volumes={str(ROOT): {"bind": "/src", "mode": "ro"},
                     str(shared): {"bind": "/ckpt", "mode": "rw"}},
            environment={"PYTHONPATH": "/src", "SPECON_CHECKPOINT_DIR": "/ckpt/ck",
                         "SPECON_PROGRESS_FILE": "/ckpt/progress.jsonl"},
            labels={**LABEL, label: "true"}, cpu_period=100_000,
            cpu_quota=int(node_cpus * 100_000),
        )
        try:
            deadline = time.monotonic() + 300
            while not records(progress, "progress"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no progress: {container.logs().decode()[-2000:]}")
                time.sleep(0.5)
            target = DockerDiscovery(engine, label).target(
                engine.api.inspect_container(container.id))
            assert target is not None
            if variant == "no-hint":
                target = dataclasses.replace(target, checkpoint_dir=None)
            agent = Agent(LoopConfig(node="bench"), DockerActuator(engine, node_cpus=node_cpus),
                          CpuMeter())
            agent.handle(Arrived(target), time.time())
            agent.control.set_qos_limits({container.id: limit / node_cpus}, 0.0)
            agent.apply(time.time())
            time.sleep(warmup)
            begin, used0 = time.time(), cpu_ns(container)
            time.sleep(window)
            end, used1 = time.time(), cpu_ns(container)
            measured = rate(progress, begin, end)
            cores = (used1 - used0) / 1e9 / (end - begin)
            applied = [r["threads"] for r in records(progress, "threads")]
            agent.close()
            return measured, cores, applied
        finally:
            container.remove(force=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=4, help="threads the job starts with")
    p.add_argument("--limit", type=float, default=1.0, help="the CPU limit in cores")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=float, default=15.0)
    p.add_argument("--window", type=float, default=30.0)
    args = p.parse_args()
    if args.threads < 1 or not args.limit > 0 or args.repeats < 1 or args.window <= 0:
        raise SystemExit("error: --threads, --limit, --repeats and --window must be positive")
    engine = docker.from_env()
    node_cpus = float(engine.info()["NCPU"])
    if args.limit > node_cpus:
        raise SystemExit(f"error: --limit {args.limit} exceeds this node's {node_cpus:g} CPUs")
    variants = ("no-hint", "hint", "1-thread")
    rates: dict[str, list[float]] = {v: [] for v in variants}
    used: dict[str, list[float]] = {v: [] for v in variants}
    print(f"cnn, {args.threads} threads at start, limit {args.limit:g} cores on a "
          f"{node_cpus:g}-CPU node; hint = {threads_for_limit(args.limit, node_cpus)} threads; "
          f"{args.repeats} repeats, {args.warmup:g} s warm-up, {args.window:g} s window",
          flush=True)
    for rep in range(args.repeats):
        for v in variants:
            r, cores, applied = run_variant(engine, node_cpus, v, args.threads, args.limit,
                                            args.warmup, args.window)
            rates[v].append(r)
            used[v].append(cores)
            print(f"  repeat {rep + 1} {v:9s} {r:.3f} steps/s  {cores:.3f} cores used  "
                  f"threads events {applied}", flush=True)
    print("\n| variant | steps/s median (min-max) | ratio to no-hint, per repeat "
          "| cores used median (min-max) | steps per CPU-second, median |")
    print("|---|---|---|---|---|")
    for v in variants:
        ratios = [a / b for a, b in zip(rates[v], rates["no-hint"], strict=True)]
        per_cpu = [a / c for a, c in zip(rates[v], used[v], strict=True)]
        print(f"| {v} | {statistics.median(rates[v]):.3f} ({min(rates[v]):.3f}-"
              f"{max(rates[v]):.3f}) | {', '.join(f'{x:.3f}' for x in ratios)} "
              f"| {statistics.median(used[v]):.3f} ({min(used[v]):.3f}-{max(used[v]):.3f}) "
              f"| {statistics.median(per_cpu):.3f} |")


if __name__ == "__main__":
    main()
