"""How close the simulator's node model comes to real containers on this Docker host.

1. Calibrates on this host, with short real runs of the example jobs: each model's seconds per
   iteration with one thread and with two (its speed-up table here), the start-up time of a
   container, the slow-down of two single-thread jobs side by side (interference) and of two
   two-thread jobs sharing two cores (oversubscription).
2. Runs two mixes of real jobs with different thread counts, staggered, twice each: with no
   agent (equal CFS shares: `default`) and with `specon-agent` in standalone mode (FlowCon:
   the simulator's `flowcon`).
3. Simulates the same mixes with the calibrated profiles and node model (and once more with
   the node model's shipped interference and oversubscription constants), and prints every
   job's real and simulated completion time and the median absolute error per mix and arm.

Usage: python benchmarks/sim_vs_real.py [--out results/sim_vs_real] [--repeats 1]
About 12 minutes per repeat on a 2-core host; completion times depend on the host's other load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import docker

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agent_vs_na import ALPHA, BETA, INTERVAL_S, ROOT, busy_cores, run_real

from specon.core.policy import POLICIES
from specon.sim.engine import Simulator
from specon.sim.model import SimConfig
from specon.workload.load import parse_workload

PROFILES = ROOT / "specon" / "data" / "profiles"
FILES = {"mlp": "mlp-digits", "vae": "vae-digits", "gru": "gru-digits", "rnn": "rnn-digits",
         "birnn": "birnn-digits", "dynrnn": "dynrnn-synthetic"}
# (model, iterations, submit s, threads): about 40 s of one core each.
MIXES = {
    "A": [("mlp", 14000, 0.0, 1), ("birnn", 1600, 10.0, 2), ("gru", 3500, 20.0, 1),
          ("vae", 12000, 30.0, 2)],
    "B": [("mlp", 14000, 0.0, 2), ("rnn", 7000, 8.0, 1), ("gru", 3500, 16.0, 2),
          ("vae", 12000, 24.0, 1), ("birnn", 1600, 32.0, 1), ("dynrnn", 700, 40.0, 2)],
}
CALIBRATE_SHARE = 0.25  # calibration runs use this share of a mix job's iterations


def wall(client: docker.DockerClient, jobs: list[tuple[str, int, float, int]],
         log_dir: Path) -> list[float]:
    """Completion times of ``jobs`` started together (submit times ignored), no agent."""
    runs = run_real(client, [(m, n, 0.0) for m, n, _, _ in jobs], False, log_dir,
                    threads=[t for *_, t in jobs])
    return [r["completion_s"] for r in runs]


def calibrate(client: docker.DockerClient, models: list[tuple[str, int]], log_dir: Path
              ) -> dict[str, Any]:
    start = statistics.median(wall(client, [("mlp", 1, 0.0, 1)], log_dir)[0] for _ in range(3))
    per: dict[str, dict[str, float]] = {}
    for model, iterations in models:
        n = max(50, int(iterations * CALIBRATE_SHARE))
        t1 = wall(client, [(model, n, 0.0, 1)], log_dir)[0] - start
        t2 = wall(client, [(model, n, 0.0, 2)], log_dir)[0] - start
        per[model] = {"seconds_per_iteration": t1 / n, "speedup_2": t1 / t2}
        print(f"  {model}: {t1 / n * 1000:.2f} ms/iteration, 2 threads {t1 / t2:.2f}x",
              file=sys.stderr, flush=True)
    model, iterations = models[0]
    n = max(50, int(iterations * CALIBRATE_SHARE))
    solo = per[model]["seconds_per_iteration"] * n
    pair1 = statistics.mean(wall(client, [(model, n, 0.0, 1)] * 2, log_dir)) - start
    pair2 = statistics.mean(wall(client, [(model, n, 0.0, 2)] * 2, log_dir)) - start
    interference = max(0.0, min(0.5, 1.0 - solo / pair1))
    # two 2-thread jobs on two cores: each runs at speed(1) * (1 - penalty / 2) * interference
    penalty = max(0.0, min(0.9, 2.0 * (1.0 - pair1 / pair2)))
    return {"start_s": start, "models": per, "interference": interference,
            "oversubscription_penalty": penalty}


def workload(mix: list[tuple[str, int, float, int]], cal: dict[str, Any], cpus: float
             ) -> dict[str, Any]:
    profiles, jobs = {}, []
    for i, (model, iterations, submit, threads) in enumerate(mix):
        prof = json.loads((PROFILES / f"{FILES[model]}.json").read_text())
        m = cal["models"][model]
        # the container's start-up is paid as part of the job's work
        per_it = m["seconds_per_iteration"] + cal["start_s"] / iterations
        prof.update(cpu_seconds_per_iteration=per_it,
                    speedup={"1": 1.0, "2": m["speedup_2"]})
        profiles[model] = prof
        jobs.append({"name": f"{i}-{model}", "profile": model, "submit_s": submit,
                     "work_scale": iterations / prof["iterations"], "cores": threads,
                     "migratable": False})
    return {"format": "specon-workload/v1", "cluster": {"workers": [
        {"name": "host", "cpus": cpus}]}, "profiles": profiles, "jobs": jobs,
        "description": "benchmarks/sim_vs_real.py: one Docker host, staggered example jobs"}


def simulate(doc: dict[str, Any], policy: str, cal: dict[str, Any], shipped: bool = False
             ) -> list[float]:
    """``shipped``: the node model's shipped constants (from the quiet 16-core host) instead of
    the interference and oversubscription measured here."""
    wl = parse_workload(doc, Path("workload.json"))
    node = {} if shipped else {"interference": cal["interference"],
                               "oversubscription_penalty": cal["oversubscription_penalty"]}
    cfg = SimConfig(alpha=ALPHA, interval_s=INTERVAL_S, flowcon_alpha=ALPHA, flowcon_beta=BETA,
                    record_timeline=False, **node)
    res = Simulator(wl, POLICIES[policy], cfg, seed=0).run()
    return [j.completion_s for j in res.jobs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "sim_vs_real")
    ap.add_argument("--repeats", type=int, default=1, help="real runs per mix and arm")
    ap.add_argument("--mixes", default="A,B", help="comma-separated: " + ", ".join(MIXES))
    a = ap.parse_args()
    names = [m.strip() for m in a.mixes.split(",") if m.strip()]
    if a.repeats < 1 or not names or any(m not in MIXES for m in names):
        ap.error(f"--repeats must be >= 1 and --mixes a list of {', '.join(MIXES)}")
    a.out.mkdir(parents=True, exist_ok=True)
    client = docker.from_env()
    cpus = float(client.info()["NCPU"])
    models = sorted({(m, n) for name in names for m, n, _, _ in MIXES[name]})
    print(f"calibrating on this host ({cpus:g} CPUs, busy {busy_cores(5):.2f} cores) ...",
          file=sys.stderr, flush=True)
    cal = calibrate(client, models, a.out)
    print(f"  start-up {cal['start_s']:.1f} s, interference {cal['interference']:.3f}, "
          f"oversubscription penalty {cal['oversubscription_penalty']:.3f}", file=sys.stderr)
    results: dict[str, Any] = {"calibration": cal, "host_cpus": cpus, "mixes": {}}
    rows = []
    for name in names:
        mix = MIXES[name]
        doc = workload(mix, cal, cpus)
        for arm, agent, policy in (("default", False, "default"), ("agent", True, "flowcon")):
            real = []
            for r in range(a.repeats):
                print(f"mix {name}, {arm}, run {r + 1} ...", file=sys.stderr, flush=True)
                runs = run_real(client, [(m, n, s) for m, n, s, _ in mix], agent, a.out,
                                threads=[t for *_, t in mix])
                real.append([x["completion_s"] for x in runs])
            real_mean = [statistics.fmean(col) for col in zip(*real, strict=True)]
            sim = simulate(doc, policy, cal)
            fixed = simulate(doc, policy, cal, shipped=True)
            errs = [abs(s - r) / r for s, r in zip(sim, real_mean, strict=True)]
            errs_fixed = [abs(s - r) / r for s, r in zip(fixed, real_mean, strict=True)]
            results["mixes"].setdefault(name, {})[arm] = {
                "jobs": [f"{m} ({t} thread{'s' if t > 1 else ''})" for m, _, _, t in mix],
                "real_runs": real, "real": real_mean, "sim": sim, "sim_shipped_model": fixed,
                "median_abs_error": statistics.median(errs),
                "median_abs_error_shipped_model": statistics.median(errs_fixed)}
            rows.append((name, arm, mix, real, real_mean, sim, statistics.median(errs), fixed,
                         statistics.median(errs_fixed)))
    (a.out / "result.json").write_text(json.dumps(results, indent=1))
    print("| mix | arm | job | real s (runs) | simulated s | error | shipped model s | error |")
    print("|---|---|---|---|---|---|---|---|")
    for name, arm, mix, real, real_mean, sim, med, fixed, med_fixed in rows:
        for i, (m, _, _, t) in enumerate(mix):
            runs = " / ".join(f"{r[i]:.1f}" for r in real)
            err = 100 * (sim[i] - real_mean[i]) / real_mean[i]
            err_f = 100 * (fixed[i] - real_mean[i]) / real_mean[i]
            print(f"| {name} | {arm} | {m}, {t} thr | {runs} | {sim[i]:.1f} | {err:+.1f}% "
                  f"| {fixed[i]:.1f} | {err_f:+.1f}% |")
        print(f"| {name} | {arm} | **median absolute error** | | | **{100 * med:.1f}%** | "
              f"| **{100 * med_fixed:.1f}%** |")
    print(f"calibration: {json.dumps(cal)}")
    print(f"written: {a.out / 'result.json'} ({time.strftime('%Y-%m-%d %H:%M')})")


if __name__ == "__main__":
    main()
