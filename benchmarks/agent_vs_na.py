"""The agent against no agent on real training containers, and what the simulator predicted.

Runs the same staggered workload of real PyTorch example jobs (from the local base image, the
repository mounted read-only) on this Docker host: with no limits at all (equal CFS shares: the
research's NA, the simulator's `default`) and with `specon-agent` in standalone mode running a
policy's node rules (`--policy`: `flowcon`, the research's FlowCon, or `progress`, CPU to
the job with the least work left). Reports each job's completion time, the average and the
makespan of each run, and the same figures from the simulator (`specon.sim`, the engine behind
`specon simulate`) for the same workload, profiles and parameters, with the simulator's error.

Workloads (`--workload`):
- `single`: four single-threaded jobs (mlp, vae, gru, rnn), about 40 s of one core each,
  started 10 s apart (the first comparison, 2026-11-21);
- `multicore`: four jobs of the multi-core models (cnn, charlm), two threads each, each
  declaring its total steps (`specon.io/total-steps`, a container label here), started 10 s
  apart: what the progress-aware rule needs to know a job's work left.

With `--repeats N` the two arms alternate N times (NA, agent, NA, agent, ...), so that both
see the same drift of the host's other load; the report gives each arm's mean with a 95%
t-interval, and the per-repeat paired change with its mean and interval.

Usage: python benchmarks/agent_vs_na.py [--workload single|multicore] [--policy flowcon]
       [--repeats 1] [--out results/agent_vs_na] [--scale 1.0]
About 3 minutes per repeat on a 2-core host. The workload file it writes can be replayed with
`specon simulate results/agent_vs_na/workload.json --policies default,<policy> --seeds 1
--alpha 0.05 --interval 10 --beta 2`.
Completion times depend on the host's other load at the time: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import docker

from specon.core.policy import POLICIES, canonical
from specon.names import ANNOTATION_TOTAL_STEPS as TOTAL_STEPS
from specon.sim.engine import Simulator
from specon.sim.model import SimConfig
from specon.sim.runner import t95
from specon.workload.load import parse_workload

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "specon" / "data" / "profiles"
# (model, iterations, submit time in s, threads): started 10 s apart, so that four jobs compete
# for the host's two cores.
WORKLOADS: dict[str, list[tuple[str, int, float, int]]] = {
    # about 40 s of one core each
    "single": [("mlp", 14000, 0.0, 1), ("vae", 12000, 10.0, 1), ("gru", 3500, 20.0, 1),
               ("rnn", 7000, 30.0, 1)],
    # the multi-core models, two threads each, of unequal lengths (work left differs)
    "multicore": [("cnn", 160, 0.0, 2), ("charlm", 40, 10.0, 2), ("cnn", 60, 20.0, 2),
                  ("charlm", 90, 30.0, 2)],
}
PROFILE_FILES = {"mlp": "mlp-digits", "vae": "vae-digits", "gru": "gru-digits",
                 "rnn": "rnn-digits", "cnn": "cnn-synthetic", "charlm": "charlm-synthetic"}
# The research's FlowCon parameters at a short interval (the same for the agent and the
# simulator).
ALPHA, INTERVAL_S, BETA = 0.05, 10.0, 2.0


def image() -> str:
    return os.environ.get("SPECON_BASE_IMAGE") or (
        "specon-base:" + (ROOT / "hack/images/base-tag").read_text().strip())


def stamp(text: str) -> float:
    # Docker's RFC 3339 with nanoseconds; Python takes microseconds.
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float("0." + (frac or "0"))


def busy_cores(seconds: float = 10.0) -> float:
    """Cores the host is busy with (everything but idle and iowait), over a window."""
    def sample() -> tuple[int, int]:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(f) - f[3] - f[4], sum(f)

    b0, t0 = sample()
    time.sleep(seconds)
    b1, t1 = sample()
    return (b1 - b0) / max(1, t1 - t0) * (os.cpu_count() or 1)


def run_real(client: docker.DockerClient, jobs: list[tuple[str, int, float]], with_agent: bool,
             log_dir: Path, threads: list[int] | None = None, policy: str = "flowcon",
             declare_totals: bool = False) -> list[dict[str, Any]]:
    """Run ``jobs`` (model, iterations, submit time) as containers, with or without the agent
    (running ``policy``'s node rules); ``threads``: each job's thread count (default one
    each); ``declare_totals``: each container states its iterations as its total steps."""
    label = f"specon.bench/agent-{secrets.token_hex(4)}"
    counts = threads or [1] * len(jobs)
    agent = None
    if with_agent:
        log = open(log_dir / "agent.log", "ab")  # noqa: SIM115
        # The agent's `paper` is the simulator's `flowcon` on one node (FlowCon, Algorithm 3's
        # requests with no manager to answer them).
        agent_policy = "paper" if policy == "flowcon" else policy
        agent = subprocess.Popen(
            [sys.executable, "-m", "specon_agent", "--label", label, "--metrics-port", "0",
             "--interval-s", str(INTERVAL_S), "--alpha", str(ALPHA), "--flowcon-alpha",
             str(ALPHA), "--flowcon-beta", str(BETA), "--poll-s", "1",
             "--policy", agent_policy],
            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        time.sleep(3)
    t0 = time.time()
    started = []
    try:
        for i, (model, iterations, submit) in enumerate(jobs):
            time.sleep(max(0.0, t0 + submit - time.time()))
            c = client.containers.run(
                image(), ["python3", "-m", "specon_examples", model, "--iterations",
                          str(iterations), "--threads", str(counts[i]), "--seed", str(i)],
                detach=True, network_mode="none", working_dir="/src",
                volumes={str(ROOT): {"bind": "/src", "mode": "ro"}},
                environment={"PYTHONPATH": "/src"},
                labels={label: "true", **({TOTAL_STEPS: str(iterations)}
                                          if declare_totals else {})},
                name=f"bench-{label.rsplit('-', 1)[1]}-{i}-{model}")
            started.append((c, submit))
        out = []
        for c, submit in started:
            c.wait()
            c.reload()
            st = c.attrs["State"]
            out.append({"name": c.name.split("-", 2)[2], "submit_s": submit,
                        "exit": st["ExitCode"],
                        "completion_s": stamp(st["FinishedAt"]) - t0 - submit,
                        "finish_s": stamp(st["FinishedAt"]) - t0})
        return out
    finally:
        if agent is not None:
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=60)
        for c, _ in started:
            c.remove(force=True)


def workload_doc(jobs: list[tuple[str, int, float]], cpus: float,
                 threads: list[int] | None = None) -> dict[str, Any]:
    profiles = {}
    specs = []
    counts = threads or [1] * len(jobs)
    for i, (model, iterations, submit) in enumerate(jobs):
        prof = json.loads((PROFILES / f"{PROFILE_FILES[model]}.json").read_text())
        profiles[model] = prof
        specs.append({"name": f"{i}-{model}", "profile": model, "submit_s": submit,
                      "work_scale": iterations / prof["iterations"], "cores": counts[i],
                      "migratable": False})
    return {"format": "specon-workload/v1", "cluster": {"workers": [
        {"name": "host", "cpus": cpus}]}, "profiles": profiles, "jobs": specs,
        "description": "benchmarks/agent_vs_na.py: one Docker host, staggered example jobs"}


def simulate(doc: dict[str, Any], policy: str, speed: float = 1.0) -> list[dict[str, Any]]:
    if speed != 1.0:
        workers = [{**w, "speed": speed} for w in doc["cluster"]["workers"]]
        doc = {**doc, "cluster": {"workers": workers}}
    wl = parse_workload(doc, Path("workload.json"))
    cfg = SimConfig(alpha=ALPHA, interval_s=INTERVAL_S, flowcon_alpha=ALPHA, flowcon_beta=BETA,
                    record_timeline=False)
    res = Simulator(wl, POLICIES[policy], cfg, seed=0).run()
    return [{"name": j.name, "submit_s": j.submit_s, "completion_s": j.completion_s,
             "finish_s": j.finish_s} for j in res.jobs]


def summary(jobs: list[dict[str, Any]]) -> dict[str, float]:
    return {"average_s": statistics.mean(j["completion_s"] for j in jobs),
            "makespan_s": max(j["finish_s"] for j in jobs) - min(j["submit_s"] for j in jobs)}


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t-interval (0 for a single value)."""
    m = statistics.mean(values)
    if len(values) < 2:
        return m, 0.0
    return m, t95(len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "agent_vs_na")
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="single")
    ap.add_argument("--policy", type=canonical, choices=["flowcon", "progress"],
                    default="flowcon", help="the policy whose node rules the agent runs (and the "
                    "simulator); the old name specon+flowcon is read as progress, with a warning")
    ap.add_argument("--repeats", type=int, default=1, help="alternating runs of each arm")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every job's iterations")
    args = ap.parse_args()
    if args.repeats < 1 or args.scale <= 0:
        ap.error("--repeats must be at least 1 and --scale positive")
    args.out.mkdir(parents=True, exist_ok=True)
    spec = WORKLOADS[args.workload]
    jobs = [(m, max(10, round(n * args.scale)), s) for m, n, s, _ in spec]
    threads = [t for *_, t in spec]
    declare = args.workload == "multicore"
    client = docker.from_env()
    cpus = float(client.info()["NCPU"])
    doc = workload_doc(jobs, cpus, threads)
    (args.out / "workload.json").write_text(json.dumps(doc, indent=1))
    arms = (("na", False, "default"), ("agent", True, args.policy))
    results: dict[str, Any] = {"host_cpus": cpus, "load_before": os.getloadavg(),
                               "workload": args.workload, "policy": args.policy,
                               "alpha": ALPHA, "interval_s": INTERVAL_S, "beta": BETA,
                               "runs": []}
    for key, _, policy in arms:
        sim = simulate(doc, policy)
        results[key] = {"sim": sim, "sim_summary": summary(sim)}
    for rep in range(args.repeats):
        for key, with_agent, policy in arms:
            # Other work on the host takes CPU the simulated worker would otherwise have:
            # measured just before the run, it gives the "calibrated" prediction.
            busy = busy_cores(5.0)
            print(f"repeat {rep + 1}/{args.repeats}: {key} (host busy with {busy:.2f} cores "
                  "before) ...", file=sys.stderr, flush=True)
            speed = max(0.1, (cpus - busy) / cpus)
            cal = simulate(doc, policy, speed)
            real = run_real(client, jobs, with_agent, args.out, threads=threads,
                            policy=args.policy, declare_totals=declare)
            bad = [j["name"] for j in real if j["exit"] != 0]
            if bad:
                raise SystemExit(f"jobs failed in the {key} run: {bad} (see docker logs)")
            results["runs"].append({"repeat": rep, "arm": key, "real": real,
                                    "real_summary": summary(real), "busy_before_cores": busy,
                                    "sim_calibrated_speed": speed,
                                    "sim_calibrated_summary": summary(cal),
                                    "load_after": os.getloadavg()})
            s = summary(real)
            print(f"  {key}: average {s['average_s']:.1f} s, makespan {s['makespan_s']:.1f} s",
                  file=sys.stderr, flush=True)
    (args.out / "result.json").write_text(json.dumps(results, indent=1))
    report(results, jobs, args)


def report(results: dict[str, Any], jobs: list[tuple[str, int, float]],
           args: argparse.Namespace) -> None:
    runs = results["runs"]
    by = {k: [r for r in runs if r["arm"] == k] for k in ("na", "agent")}
    print(f"workload {args.workload}, agent policy {args.policy}, {args.repeats} repeat(s), "
          f"host {results['host_cpus']:g} CPUs")
    print(f"{'job':<12}{'NA real':>10}{'NA sim':>9}{'agent real':>12}{'agent sim':>11}"
          "   (real: mean of the repeats)")
    for i in range(len(jobs)):
        cells = []
        for k in ("na", "agent"):
            cells.append(statistics.mean(r["real"][i]["completion_s"] for r in by[k]))
            cells.append(results[k]["sim"][i]["completion_s"])
        print(f"{by['na'][0]['real'][i]['name']:<12}{cells[0]:>10.1f}{cells[1]:>9.1f}"
              f"{cells[2]:>12.1f}{cells[3]:>11.1f}")
    lines = []
    for metric in ("average_s", "makespan_s"):
        na = [r["real_summary"][metric] for r in by["na"]]
        ag = [r["real_summary"][metric] for r in by["agent"]]
        change = [100 * (a - n) / n for n, a in zip(na, ag, strict=True)]
        (mn, hn), (ma, ha), (mc, hc) = interval(na), interval(ag), interval(change)
        s_na, s_ag = (results[k]["sim_summary"][metric] for k in ("na", "agent"))
        predicted = 100 * (s_ag - s_na) / s_na
        line = (f"{metric}: NA {mn:.1f} ± {hn:.1f} s, agent {ma:.1f} ± {ha:.1f} s; paired "
                f"change {mc:+.1f}% ± {hc:.1f} (per repeat: "
                f"{', '.join(f'{c:+.1f}%' for c in change)}); simulator predicted "
                f"{s_na:.1f} -> {s_ag:.1f} s ({predicted:+.1f}%)")
        lines.append(line)
        print(line)
    print(f"load average before/after: {results['load_before']} / "
          f"{runs[-1]['load_after']}")
    (args.out / "summary.txt").write_text("\n".join(lines) + "\n")
    print(f"written: {args.out / 'result.json'}, {args.out / 'summary.txt'}")


if __name__ == "__main__":
    main()
