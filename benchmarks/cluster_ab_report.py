"""The numbers of benchmarks/cluster_ab.py from its raw record: each job's completion and time
to 90% of its loss reduction, each arm's summary per repeat, paired changes with 95%
intervals, the simulator's prediction for the same jobs and nodes, and the Markdown tables."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specon.sim.milestones import smoothed
from specon.sim.model import SimConfig
from specon.sim.runner import Stat, run_one
from specon.workload.load import parse_workload

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "specon" / "data" / "profiles"
#: The arms, as the record names them, and the simulator's policy standing for each.
ARMS = {"none": "default", "specon": "progress"}
METRICS = ("avg_completion_s", "makespan_s", "avg_time_to_90_s", "moves")


def time_to_90(records: Sequence[dict[str, Any]], submitted: float) -> float | None:
    """Seconds from submission until the smoothed logged loss (the simulator's running median)
    first reaches 90% of its total reduction (first minus lowest); None: no losses logged."""
    pts = sorted((r["step"], r["time"], r["loss"]) for r in records
                 if r.get("event") == "progress" and isinstance(r.get("loss"), int | float)
                 and math.isfinite(r["loss"]))
    if not pts:
        return None
    sm = smoothed([p[2] for p in pts])
    level = sm[0] - 0.9 * (sm[0] - min(sm))
    return next(t for (_, t, _), v in zip(pts, sm, strict=True) if v <= level) - submitted


def job_row(job: dict[str, Any]) -> dict[str, Any]:
    """One job's measured outcome from what the run kept of it."""
    done = job.get("finished") is not None
    return {"name": job["name"], "base": job["base"], "model": job["model"],
            "iterations": job["iterations"],
            "submit_s": job["submit_s"], "status": job["status"],
            "completion_s": job["finished"] - job["submitted"] if done else None,
            "time_to_90_s": time_to_90(job["records"], job["submitted"]),
            "moves": sum(1 for r in job["records"] if r.get("event") == "resume"),
            "nodes": job.get("nodes", [])}


def run_summary(run: dict[str, Any]) -> dict[str, Any]:
    rows = [job_row(j) for j in run["jobs"]]
    comp = [r["completion_s"] for r in rows if r["completion_s"] is not None]
    t90 = [r["time_to_90_s"] for r in rows if r["time_to_90_s"] is not None]
    ends = [j["finished"] for j in run["jobs"] if j.get("finished") is not None]
    first = min(j["submitted"] for j in run["jobs"])
    complete = len(comp) == len(rows)
    return {"arm": run["arm"], "repeat": run["repeat"], "jobs": rows,
            "finished": complete,
            "avg_completion_s": statistics.fmean(comp) if complete else math.nan,
            "makespan_s": max(ends) - first if complete else math.nan,
            "avg_time_to_90_s": statistics.fmean(t90) if t90 else math.nan,
            "moves": sum(r["moves"] for r in rows)}


def paired(runs: Sequence[dict[str, Any]], metric: str) -> Stat:
    """SpeCon against no SpeCon in % of no SpeCon, paired by repeat (negative: SpeCon lower)."""
    by = {(r["arm"], r["repeat"]): r[metric] for r in runs}
    vals = []
    for (arm, rep), base in by.items():
        mine = by.get(("specon", rep))
        if arm == "none" and mine is not None and base:
            vals.append(100.0 * (mine - base) / base)
    return Stat.of(vals)


def workload(spec: dict[str, Any], losses: dict[str, list[float]]) -> dict[str, Any]:
    """The benchmark's jobs and nodes as a simulator workload: each node a worker of its cap,
    each job its model's shipped profile with the calibrated seconds per iteration, the job's
    own length and, where measured, the loss curve it logged without SpeCon."""
    profiles, jobs = {}, []
    # one thread (--threads 1), which the model refuses above its largest worker's CPUs
    cores = min(1.0, max(spec["nodes"].values()))
    for j in spec["jobs"]:
        prof = json.loads((PROFILES / f"{j['profile']}.json").read_text())
        prof.update(name=j["name"], iterations=j["iterations"],
                    cpu_seconds_per_iteration=spec["calibration"][j["model"]])
        curve = losses.get(j["name"], [])
        if len(curve) >= 2:
            step = max(1, len(curve) // 200)
            prof["loss"] = curve[::step]
        profiles[j["name"]] = prof
        jobs.append({"name": j["name"], "profile": j["name"], "submit_s": j["submit_s"],
                     "migratable": True, "cores": cores})
    workers = [{"name": n, "cpus": c, "speed": 1.0} for n, c in spec["nodes"].items()]
    return {"format": "specon-workload/v1", "cluster": {"workers": workers},
            "profiles": profiles, "jobs": jobs}


def predict(spec: dict[str, Any], raw: Sequence[dict[str, Any]], seeds: int) -> dict[str, Any]:
    """The simulator's runs of the same jobs and nodes, per arm's policy, over ``seeds``."""
    base = next((r for r in raw if r["arm"] == "none"), None)
    losses: dict[str, list[float]] = {}
    for j in (base or {}).get("jobs", []):
        pts = sorted((r["step"], r["loss"]) for r in j["records"] if r.get("event") == "progress")
        losses[j["base"]] = [loss for _, loss in pts]
    doc = workload(spec, losses)
    wl = parse_workload(doc, ROOT / "cluster-ab.json", base=PROFILES)
    config = SimConfig(interval_s=spec["interval_s"])
    out: dict[str, Any] = {"workload": doc, "policies": dict(ARMS)}
    sims: dict[str, list[dict[str, Any]]] = {}
    for arm, policy in ARMS.items():
        sims[arm] = [{"arm": arm, "repeat": s, **{
            k: float(v) for k, v in run_one(wl, policy, config, s).summary().items()}}
            for s in range(seeds)]
        for r in sims[arm]:
            r["moves"] = r["migrations"]
        out[arm] = {m: asdict(Stat.of([r[m] for r in sims[arm]])) for m in METRICS}
    out["change_pct"] = {m: asdict(paired(sims["none"] + sims["specon"], m))
                         for m in METRICS if m != "moves"}
    return out


def aggregate(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in ARMS:
        mine = [s for s in summaries if s["arm"] == arm]
        out[arm] = {m: asdict(Stat.of([s[m] for s in mine])) for m in METRICS}
    out["change_pct"] = {m: asdict(paired(summaries, m)) for m in METRICS if m != "moves"}
    return out


def _fmt(stat: dict[str, Any], unit: str = "") -> str:
    if stat["n"] == 0 or not math.isfinite(stat["mean"]):
        return "n/a"
    ci = f" ± {stat['ci95']:.1f}" if stat["n"] > 1 else ""
    return f"{stat['mean']:.1f}{ci}{unit}"


def markdown(record: dict[str, Any]) -> str:
    spec, agg, sim = record["spec"], record["aggregate"], record.get("prediction")
    caps = ", ".join(f"{n}: {c:g}" for n, c in spec["nodes"].items())
    lines = [f"# Real nodes: SpeCon against no SpeCon ({record['started']})", "",
             f"Nodes (CPU caps): {caps}. Jobs: {len(spec['jobs'])}. Repeats: "
             f"{spec['repeats']}. Calibration: {spec['calibration_source']}.", "",
             "| metric | no SpeCon | SpeCon | change (paired, %) | simulator's change (%) |",
             "|---|---|---|---|---|"]
    for m in METRICS:
        change = _fmt(agg["change_pct"][m], " %") if m in agg["change_pct"] else ""
        predicted = _fmt(sim["change_pct"][m], " %") if sim and m in sim["change_pct"] else ""
        lines.append(f"| {m} | {_fmt(agg['none'][m])} | {_fmt(agg['specon'][m])} | {change} "
                     f"| {predicted} |")
    if sim:
        lines += ["", "Simulator (same jobs and nodes): " + "; ".join(
            f"{arm} ({ARMS[arm]}) avg completion {_fmt(sim[arm]['avg_completion_s'])} s, "
            f"makespan {_fmt(sim[arm]['makespan_s'])} s" for arm in ARMS)]
    lines += ["", "## Per job (mean ± 95% interval over repeats, seconds)", "",
              "| job | model | iterations | submit | completion, none | completion, SpeCon "
              "| t90, none | t90, SpeCon | moves (SpeCon, total) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for j in spec["jobs"]:
        rows = {arm: [r for s in record["summaries"] if s["arm"] == arm for r in s["jobs"]
                      if r["base"] == j["name"]] for arm in ARMS}

        def cell(arm: str, key: str, rows: dict[str, list[dict[str, Any]]] = rows) -> str:
            return _fmt(asdict(Stat.of([r[key] for r in rows[arm] if r[key] is not None])))
        moves = sum(r["moves"] for r in rows["specon"])
        lines.append(f"| {j['name']} | {j['model']} | {j['iterations']} | {j['submit_s']:g} | "
                     f"{cell('none', 'completion_s')} | {cell('specon', 'completion_s')} | "
                     f"{cell('none', 'time_to_90_s')} | {cell('specon', 'time_to_90_s')} | "
                     f"{moves} |")
    return "\n".join(lines) + "\n"
