"""The agent against no agent on real training containers, and what the simulator predicted.

Runs the same staggered workload of real PyTorch example jobs (one thread each, from the local
base image, the repository mounted read-only) twice on this Docker host: once with no limits at
all (equal CFS shares: the research's NA), once with `specon-agent` in standalone mode (FlowCon).
Reports each job's completion time, the average and the makespan of both runs, and the same
figures from the simulator (`specon.sim`, the engine behind `specon simulate`) for the same
workload, profiles and parameters, with the simulator's error in %.

Usage: python benchmarks/agent_vs_na.py [--out results/agent_vs_na] [--scale 1.0]
About 6-10 minutes on a 2-core host. The workload file it writes can be replayed with
`specon simulate results/agent_vs_na/workload.json --policies default,flowcon --seeds 1
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

from specon.core.policy import POLICIES
from specon.sim.engine import Simulator
from specon.sim.model import SimConfig
from specon.workload.load import parse_workload

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "specon" / "data" / "profiles"
# (model, iterations, submit time in s): about 40 s of one core each, started 10 s apart, so
# that four single-threaded jobs compete for the host's two cores.
WORKLOAD = [("mlp", 14000, 0.0), ("vae", 12000, 10.0), ("gru", 3500, 20.0), ("rnn", 7000, 30.0)]
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
             log_dir: Path, threads: list[int] | None = None) -> list[dict[str, Any]]:
    """Run ``jobs`` (model, iterations, submit time) as containers, with or without the agent;
    ``threads``: each job's thread count (default one each)."""
    label = f"specon.bench/agent-{secrets.token_hex(4)}"
    counts = threads or [1] * len(jobs)
    agent = None
    if with_agent:
        log = open(log_dir / "agent.log", "wb")  # noqa: SIM115
        agent = subprocess.Popen(
            [sys.executable, "-m", "specon_agent", "--label", label, "--metrics-port", "0",
             "--interval-s", str(INTERVAL_S), "--alpha", str(ALPHA), "--flowcon-alpha",
             str(ALPHA), "--flowcon-beta", str(BETA), "--poll-s", "1"],
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
                labels={label: "true"},
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


def workload_doc(jobs: list[tuple[str, int, float]], cpus: float) -> dict[str, Any]:
    profiles = {}
    specs = []
    for i, (model, iterations, submit) in enumerate(jobs):
        prof = json.loads((PROFILES / f"{model}-digits.json").read_text())
        profiles[model] = prof
        specs.append({"name": f"{i}-{model}", "profile": model, "submit_s": submit,
                      "work_scale": iterations / prof["iterations"], "cores": 1.0,
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "agent_vs_na")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every job's iterations")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = [(m, max(200, round(n * args.scale)), s) for m, n, s in WORKLOAD]
    client = docker.from_env()
    cpus = float(client.info()["NCPU"])
    doc = workload_doc(jobs, cpus)
    (args.out / "workload.json").write_text(json.dumps(doc, indent=1))
    results: dict[str, Any] = {"host_cpus": cpus, "load_before": os.getloadavg(),
                               "alpha": ALPHA, "interval_s": INTERVAL_S, "beta": BETA}
    for key, with_agent, policy in (("na", False, "default"), ("agent", True, "flowcon")):
        # Other work on the host takes CPU the simulated worker would otherwise have: measured
        # just before the run, it gives the "calibrated" prediction beside the nominal one.
        busy = busy_cores()
        print(f"running {key} (host busy with {busy:.2f} cores before) ...", file=sys.stderr,
              flush=True)
        # The calibrated worker is slower by the share of the host others were using.
        speed = max(0.1, (cpus - busy) / cpus)
        sim = simulate(doc, policy)
        cal = simulate(doc, policy, speed)
        real = run_real(client, jobs, with_agent, args.out)
        results[key] = {"real": real, "real_summary": summary(real), "sim": sim,
                        "sim_summary": summary(sim), "busy_before_cores": busy,
                        "sim_calibrated_speed": speed, "sim_calibrated": cal,
                        "sim_calibrated_summary": summary(cal), "load_after": os.getloadavg()}
    (args.out / "result.json").write_text(json.dumps(results, indent=1))

    print(f"{'job':<10}{'NA real':>10}{'NA sim':>10}{'agent real':>12}{'agent sim':>11}")
    for i in range(len(jobs)):
        row = [results[k][w][i]["completion_s"] for k in ("na", "agent") for w in ("real", "sim")]
        print(f"{results['na']['real'][i]['name']:<10}" + "".join(
            f"{v:>10.1f}" if j % 2 == 0 else f"{v:>11.1f}" for j, v in enumerate(row)))
    for metric in ("average_s", "makespan_s"):
        na, ag = results["na"], results["agent"]
        r_na, r_ag = na["real_summary"][metric], ag["real_summary"][metric]
        s_na, s_ag = na["sim_summary"][metric], ag["sim_summary"][metric]
        print(f"{metric:<10}{r_na:>10.1f}{s_na:>10.1f}{r_ag:>12.1f}{s_ag:>11.1f}   "
              f"agent vs NA real {100 * (r_ag - r_na) / r_na:+.1f}%, sim "
              f"{100 * (s_ag - s_na) / s_na:+.1f}%; sim error NA "
              f"{100 * (s_na - r_na) / r_na:+.1f}%, agent {100 * (s_ag - r_ag) / r_ag:+.1f}%")
    for metric in ("average_s", "makespan_s"):
        errs = []
        for k in ("na", "agent"):
            r = results[k]["real_summary"][metric]
            c = results[k]["sim_calibrated_summary"][metric]
            errs.append(f"{k} {c:.1f} s ({100 * (c - r) / r:+.1f}% vs real, worker speed "
                        f"{results[k]['sim_calibrated_speed']:.2f})")
        print(f"calibrated sim {metric}: " + "; ".join(errs))
    print(f"load average before/after: {results['load_before']} / "
          f"{results['agent']['load_after']}")
    print(f"written: {args.out / 'result.json'}")


if __name__ == "__main__":
    main()
