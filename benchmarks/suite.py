"""Every policy over the random-workload suite (specon.sim.generate), against `default`.

For each workload (one per seed of the generator) every policy runs with several simulator
seeds (they change only random tie-breaks) and the seed means are compared with default's:
the change in average completion, makespan and time to 90% of the loss reduction, and each
job's completion over its completion under default (slow-down). Per policy the table gives the
distribution over workloads: mean, median, best and worst change, and how many workloads it
lost (slower than default by more than 1%).

    python benchmarks/suite.py                        # 30 workloads x 3 seeds, every policy
    python benchmarks/suite.py --workloads 5 --seeds 1 --policies default,progress
    python benchmarks/suite.py --family widened --workloads 12 --policies default,progress
        # 12 workloads of each family of specon.sim.generate.FAMILIES (overload, speeds
        # 0.25-4, 16-64 workers, heavy-tailed lengths, bursty arrivals on speeds 0.25-4, and
        # the default draws): 72 in all
    python benchmarks/suite.py --family widened --noise standard
        # the same, where policies see what real logs give them (NOISE, docs/experiments.md):
        # half the jobs declare no total steps, step costs off by up to 25%, noisier losses
    python benchmarks/suite.py --family widened --policies default,progress --redrawn
        # and a row for default against itself (REDRAWN): the same scheduler on other
        # simulator seeds, whose only difference is how its placement ties fall; the floor
        # under every column, the worst job's above all

Writes docs/results/suite.json (every number) and prints the Markdown table of the README.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specon.core.policy import POLICIES, canonical  # noqa: E402
from specon.sim.generate import FAMILIES, family_workload  # noqa: E402
from specon.sim.model import RunResult, SimConfig  # noqa: E402
from specon.sim.noise import NOISE  # noqa: E402
from specon.sim.runner import run_one  # noqa: E402

#: The pseudo-policy ``--redrawn`` adds: default on seeds REDRAW_OFFSET + each seed, compared
#: with default on the seeds themselves as any policy is.
REDRAWN = "default-redrawn"
REDRAW_OFFSET = 1000


def completions(runs: Iterable[RunResult]) -> dict[str, list[float]]:
    """Each job's completion time in each of ``runs`` (one per seed)."""
    out: dict[str, list[float]] = {}
    for res in runs:
        for j in res.jobs:
            out.setdefault(j.name, []).append(j.completion_s)
    return out


#: A policy's figures on a workload: each the mean over its seeds' runs.
METRICS = ("avg_completion_s", "makespan_s", "avg_time_to_90_s", "p95_completion_s")


def means(runs: Iterable[RunResult]) -> dict[str, float]:
    """:data:`METRICS` of ``runs``, each the mean over them."""
    rows = [r.summary() for r in runs]
    return {k: statistics.fmean(float(r[k]) for r in rows) for k in METRICS}


def slowdowns(mine: dict[str, list[float]], base: dict[str, list[float]]) -> dict[str, float]:
    """Each job's mean completion over its mean completion in ``base`` (default's)."""
    return {n: statistics.fmean(v) / statistics.fmean(base[n]) for n, v in mine.items()}


def one_workload(args: tuple[str, int, list[str], list[int], dict[str, Any]]
                 ) -> dict[str, Any]:
    family, index, policies, seeds, cfg_kw = args
    wl = family_workload(family, index)
    cfg = SimConfig(record_timeline=False, **cfg_kw)
    out: dict[str, Any] = {"family": family, "workload": index, "description": wl.description,
                           "jobs": len(wl.jobs), "workers": len(wl.cluster.workers),
                           "policies": {}}
    per_job: dict[str, dict[str, list[float]]] = {}
    for p in policies:
        runs = [run_one(wl, "default", cfg, REDRAW_OFFSET + seed) if p == REDRAWN
                else run_one(wl, p, cfg, seed)
                for seed in (seeds if p != "oracle" else seeds[:1])]
        per_job[p] = completions(runs)
        out["policies"][p] = means(runs)
    for p in policies:
        if p == "oracle":
            continue
        out["policies"][p]["slowdowns"] = sorted(
            slowdowns(per_job[p], per_job["default"]).values())
    return out


def _p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, math.ceil(0.99 * len(s)) - 1)]


def _headroom(rows: list[dict[str, Any]], p: str) -> float:
    """Median share (%) of the oracle's gain in average completion over default that ``p``
    captures, over the workloads where the oracle gains (NaN without the oracle)."""
    vals = []
    for r in rows:
        pol = r["policies"]
        if "oracle" not in pol:
            continue
        base, orc = pol["default"]["avg_completion_s"], pol["oracle"]["avg_completion_s"]
        if base - orc > 1e-9 * base:
            vals.append(100.0 * (base - pol[p]["avg_completion_s"]) / (base - orc))
    return statistics.median(vals) if vals else math.nan


def pct(a: float, b: float) -> float:
    return 100.0 * (a - b) / b if b and math.isfinite(a) and math.isfinite(b) else math.nan


def summarise(rows: list[dict[str, Any]], policies: list[str]) -> list[dict[str, Any]]:
    table = []
    for p in policies:
        if p == "default":
            continue
        avg = [pct(r["policies"][p]["avg_completion_s"], r["policies"]["default"]
                   ["avg_completion_s"]) for r in rows]
        entry: dict[str, Any] = {"policy": p, "avg_mean": statistics.fmean(avg),
                                 "avg_median": statistics.median(avg), "avg_best": min(avg),
                                 "avg_worst": max(avg), "lost": sum(1 for v in avg if v > 1.0)}
        if p != "oracle":
            mk = [pct(r["policies"][p]["makespan_s"], r["policies"]["default"]["makespan_s"])
                  for r in rows]
            t90 = [pct(r["policies"][p]["avg_time_to_90_s"],
                       r["policies"]["default"]["avg_time_to_90_s"]) for r in rows]
            t90 = [v for v in t90 if math.isfinite(v)]
            entry.update(mk_mean=statistics.fmean(mk), mk_median=statistics.median(mk),
                         mk_worst=max(mk), mk_lost=sum(1 for v in mk if v > 1.0),
                         t90_median=statistics.median(t90) if t90 else math.nan,
                         t90_worst=max(t90) if t90 else math.nan,
                         headroom_median=_headroom(rows, p),
                         worst_slowdown=max(max(r["policies"][p]["slowdowns"]) for r in rows),
                         p99_slowdown=_p99([x for r in rows for x in r["policies"][p]
                                            ["slowdowns"]]))
        table.append(entry)
    return table


def markdown(table: list[dict[str, Any]]) -> str:
    def f(v: float, unit: str = "%") -> str:
        if not math.isfinite(v):
            return "—"
        return f"{v:+.1f}{unit}".replace("-", "−") if unit == "%" else f"{v:.2f}×"

    lines = ["| policy | avg completion: mean | median | best | worst | lost | makespan: mean "
             "| median | worst | lost | time to 90%: median | worst | worst job slow-down (p99) "
             "| oracle's headroom captured: median |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in table:
        if e["policy"] == "oracle":
            lines.append(f"| oracle (bound) | {f(e['avg_mean'])} | {f(e['avg_median'])} | "
                         f"{f(e['avg_best'])} | {f(e['avg_worst'])} | | | | | | | | | |")
            continue
        lines.append(
            f"| {e['policy']} | {f(e['avg_mean'])} | {f(e['avg_median'])} | {f(e['avg_best'])} "
            f"| {f(e['avg_worst'])} | {e['lost']} | {f(e['mk_mean'])} | {f(e['mk_median'])} "
            f"| {f(e['mk_worst'])} | {e['mk_lost']} | {f(e['t90_median'])} "
            f"| {f(e['t90_worst'])} | {f(e['worst_slowdown'], 'x')} "
            f"({f(e['p99_slowdown'], 'x')}) | {f(e['headroom_median'])} |")
    return "\n".join(lines)


def add_view_args(ap: argparse.ArgumentParser) -> None:
    """The arguments that say what the policies see (noise, the manager's view): shared with
    benchmarks/workload_seeds.py."""
    ap.add_argument("--noise", choices=list(NOISE), default="none",
                    help="what policies know of the jobs (NOISE); the flags below override it")
    ap.add_argument("--cost-error", type=float, default=None,
                    help="relative error of each job's measured step cost (robustness)")
    ap.add_argument("--unknown-total-share", type=float, default=None,
                    help="share of jobs that declare no total steps (robustness)")
    ap.add_argument("--loss-noise", type=float, default=None,
                    help="relative sigma of extra noise on each logged loss (robustness)")
    ap.add_argument("--fair", type=float, default=None, help="override SimConfig.fair_share")
    ap.add_argument("--qos-over-shares", action="store_true",
                    help="the agent's QoS limits over the node rule's shares, as the agent "
                    "composes them (SimConfig.qos_over_shares; docs/results.md)")
    ap.add_argument("--manager-view", action="store_true",
                    help="placement and moves see what the manager sees: no speed-up tables, "
                    "a new job as the typical one, node speeds from their labels "
                    "(SimConfig.manager_view)")
    ap.add_argument("--unlabelled", action="store_true",
                    help="with --manager-view: no node carries specon.io/cpu-speed (each "
                    "node's speed as its agent measured it)")
    ap.add_argument("--unmeasured", action="store_true",
                    help="with --unlabelled: no agent measures its node's speed either (every "
                    "node at speed 1 as the manager sees it)")
    ap.add_argument("--speed-error", type=float, default=None,
                    help="with --unlabelled: each measured speed off by up to this share of "
                    "the true one (SimConfig.speed_error)")


def view_config(ap: argparse.ArgumentParser, a: argparse.Namespace) -> dict[str, Any]:
    """SimConfig's settings for :func:`add_view_args`' arguments (bad combinations: ap.error)."""
    cfg: dict[str, Any] = dict(NOISE[a.noise])
    for key in ("cost_error", "unknown_total_share", "loss_noise", "fair"):
        if getattr(a, key) is not None:
            cfg["fair_share" if key == "fair" else key] = getattr(a, key)
    if a.qos_over_shares:
        cfg["qos_over_shares"] = True
    if a.unlabelled and not a.manager_view:
        ap.error("--unlabelled needs --manager-view")
    if (a.unmeasured or a.speed_error is not None) and not a.unlabelled:
        ap.error("--unmeasured and --speed-error need --unlabelled")
    if a.manager_view:
        cfg["manager_view"] = True
        cfg["labelled_speeds"] = not a.unlabelled
        if a.unlabelled:
            cfg["measured_speeds"] = not a.unmeasured
        if a.unlabelled and not a.unmeasured:
            cfg["speed_error"] = (SimConfig().speed_error if a.speed_error is None
                                  else a.speed_error)
    try:
        SimConfig(**cfg)
    except ValueError as exc:
        ap.error(str(exc))
    return cfg


def add_set_args(ap: argparse.ArgumentParser, family: str, workloads: int) -> None:
    """Which workloads and how many seeds: the arguments this suite and its sweeps share."""
    ap.add_argument("--workloads", type=int, default=workloads,
                    help="how many random workloads (of each family with 'widened')")
    ap.add_argument("--first", type=int, default=0, help="the first workload's index")
    ap.add_argument("--family", default=family,
                    help=f"a family of workloads ({', '.join(FAMILIES)}), or 'widened' for "
                    "--workloads of each")
    ap.add_argument("--seeds", type=int, default=3, help="simulator seeds per workload")
    ap.add_argument("--processes", type=int, default=2)


def set_families(ap: argparse.ArgumentParser, a: argparse.Namespace) -> list[str]:
    """The families :func:`add_set_args`' arguments name (bad values: ap.error)."""
    if a.workloads < 1 or a.seeds < 1 or a.processes < 1:
        ap.error("--workloads, --seeds and --processes must be at least 1")
    if a.family != "widened" and a.family not in FAMILIES:
        ap.error(f"--family: unknown family {a.family!r} (known: {', '.join(FAMILIES)}, "
                 "widened)")
    return list(FAMILIES) if a.family == "widened" else [a.family]


def run_all(fn: Callable[[Any], Any], work: list[Any], processes: int) -> Iterator[Any]:
    """``fn`` over ``work`` on ``processes`` processes, in order, with a count on stderr."""
    started = time.time()
    with ProcessPoolExecutor(processes) as pool:
        for done, out in enumerate(pool.map(fn, work), 1):
            yield out
            print(f"\r{done}/{len(work)} workloads, {time.time() - started:.0f} s",
                  end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_set_args(ap, "standard", 30)
    ap.add_argument("--policies", default="all", help="comma-separated, or 'all'")
    ap.add_argument("--redrawn", action="store_true",
                    help=f"add a row for default against itself ({REDRAWN}: default on other "
                    "seeds, only its placement ties falling otherwise)")
    add_view_args(ap)
    ap.add_argument("--out", type=Path, default=None,
                    help="default: docs/results/suite.json (suite-noisy-NOISE.json with --noise)")
    a = ap.parse_args()
    families = set_families(ap, a)
    policies = list(POLICIES) if a.policies == "all" else list(dict.fromkeys(
        canonical(p.strip()) for p in a.policies.split(",") if p.strip()))  # old names warn
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policy {unknown[0]!r} (known: {', '.join(POLICIES)})")
    if "default" not in policies:
        policies.insert(0, "default")
    if a.redrawn:
        policies.append(REDRAWN)
    cfg = view_config(ap, a)
    if a.out is None:
        name = "suite.json" if a.noise == "none" else f"suite-noisy-{a.noise}.json"
        a.out = ROOT / "docs" / "results" / name
    started = time.time()
    work = [(f, i, policies, list(range(a.seeds)), cfg)
            for f in families for i in range(a.first, a.first + a.workloads)]
    rows: list[dict[str, Any]] = list(run_all(one_workload, work, a.processes))
    table = summarise(rows, policies)
    if "oracle" in policies:  # the bound must hold on every workload, for every policy
        beaten = [(r["workload"], p) for r in rows for p in policies if p != "oracle"
                  and r["policies"][p]["avg_completion_s"]
                  < r["policies"]["oracle"]["avg_completion_s"] * (1 - 1e-6)]
        print(f"oracle below every policy on every workload: {'yes' if not beaten else 'NO'}"
              + (f" (beaten: {beaten[:5]})" if beaten else ""), file=sys.stderr)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"command": " ".join(sys.argv[1:]), "seconds": time.time()
                                 - started, "noise": a.noise, "config": cfg, "table": table,
                                 "workloads": rows}, indent=1))
    if cfg:  # what the policies were not told, and the view they were given
        print(f"config (noise {a.noise}): " + ", ".join(f"{k} {v:g}" for k, v in cfg.items())
              + "\n")
    print(markdown(table))
    if len(families) > 1:
        for f in families:
            print(f"\n{f}:\n" + markdown(summarise([r for r in rows if r["family"] == f],
                                                    policies)))
    try:
        shown = a.out.resolve().relative_to(ROOT)
    except ValueError:
        shown = a.out
    print(f"\n{len(rows)} workloads x {a.seeds} seeds in {time.time() - started:.0f} s; "
          f"every number in {shown}")


if __name__ == "__main__":
    main()
