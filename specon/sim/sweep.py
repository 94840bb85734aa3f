"""Parameter sweeps: which alpha and interval serve a workload best, on evidence."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from specon.core.policy import canonical
from specon.sim.model import SimConfig
from specon.sim.progress import LineProgress
from specon.sim.runner import Matrix, run_matrix
from specon.workload.models import Workload

SWEEPABLE = {"alpha": "alpha", "interval": "interval_s", "beta": "flowcon_beta"}


def parse_sweep(text: str) -> dict[str, list[float]]:
    """'alpha=0.01,0.05 interval=20,30' -> {'alpha': [...], 'interval': [...]}."""
    from specon.cli import UsageError

    grid: dict[str, list[float]] = {}
    for part in text.replace(";", " ").split():
        if "=" not in part:
            raise UsageError(f"--sweep: {part!r} is not NAME=V1,V2,...")
        key, values = part.split("=", 1)
        if key not in SWEEPABLE:
            raise UsageError(f"--sweep: unknown parameter {key!r} (known: alpha, interval, beta)")
        try:
            vals = [float(v) for v in values.split(",") if v]
        except ValueError:
            raise UsageError(f"--sweep: {key} values must be numbers, got {values!r}") from None
        if not vals or any(not (math.isfinite(v) and v > 0) for v in vals):
            raise UsageError(f"--sweep: {key} needs positive numbers, got {values!r}")
        if key == "beta" and any(v < 1 for v in vals):
            raise UsageError(f"--sweep: beta must be >= 1, got {values!r}")
        grid[key] = vals
    if not grid:
        raise UsageError("--sweep: give at least one of alpha=..., interval=...")
    return grid


def run_sweep(
    name: str,
    build: Callable[[int], Workload],
    policies: Sequence[str],
    seeds: Sequence[int],
    grid: dict[str, list[float]],
    out: Path,
    console: Console,
    progress: Progress | LineProgress,
) -> list[dict[str, Any]]:
    """Run every combination; the baseline policies run once (they ignore the parameters)."""
    policies = [canonical(p) for p in policies]  # an old name: its new one, with a warning
    tuned = [p for p in policies if p in ("flowcon", "progress-equal-share", "progress", "paper",
                                          "paper-specon", "slaq")]
    if not tuned:
        tuned = ["progress"]
    keys = sorted(grid)
    combos = list(itertools.product(*(grid[k] for k in keys)))
    rows: list[dict[str, Any]] = []
    with progress:
        total = len(seeds) * (1 + len(combos) * len(tuned))
        task = progress.add_task(f"sweeping {name}", total=total)
        position = {s: i + 1 for i, s in reversed(list(enumerate(seeds)))}

        def starting(setting: str) -> Callable[[str, int], None]:
            def start(p: str, s: int) -> None:
                progress.update(task, status=f"{setting}seed {position[s]}/{len(seeds)}, "
                                f"policy {p}")
            return start

        jobs = progress.jobs if isinstance(progress, LineProgress) else None
        base = run_matrix(name, build, ["default"], seeds, SimConfig(record_timeline=False),
                          tick=lambda p, s: progress.advance(task), start=starting(""),
                          job_done=jobs)
        for combo in combos:
            kwargs = {SWEEPABLE[k]: v for k, v in zip(keys, combo, strict=True)}
            cfg = SimConfig(record_timeline=False, **kwargs)  # type: ignore[arg-type]
            setting = " ".join(f"{k}={v:g}" for k, v in zip(keys, combo, strict=True)) + ", "
            mx = run_matrix(name, build, tuned, seeds, cfg,
                            tick=lambda p, s: progress.advance(task), start=starting(setting),
                            job_done=jobs)
            mx.runs["default"] = base.runs["default"]
            for p in tuned:
                row: dict[str, Any] = dict(zip(keys, combo, strict=True))
                row |= {"policy": p,
                        "avg_vs_default_pct": _paired(mx, p, "avg_completion_s"),
                        "makespan_vs_default_pct": _paired(mx, p, "makespan_s"),
                        "avg_completion_s": mx.metric(p, "avg_completion_s").mean,
                        "migrations": mx.metric(p, "migrations").mean}
                rows.append(row)
    table = Table(title=f"sweep on {name}: change vs default (mean over {len(seeds)} seeds)",
                  title_justify="left")
    for k in keys:
        table.add_column(k, justify="right")
    for col in ("policy", "avg completion", "makespan", "migrations"):
        table.add_column(col, justify="right")
    for r in sorted(rows, key=lambda r: (str(r["policy"]), r["avg_vs_default_pct"])):
        table.add_row(*(f"{r[k]:g}" for k in keys), str(r["policy"]),
                      f"{r['avg_vs_default_pct']:+.2f}%", f"{r['makespan_vs_default_pct']:+.2f}%",
                      f"{r['migrations']:.1f}")
    console.print(table)
    for p, best in best_rows(rows).items():
        console.print(f"best for {p}: " + ", ".join(f"{k}={best[k]:g}" for k in keys)
                      + f" ({best['avg_vs_default_pct']:+.2f}% average completion, "
                      f"{best['makespan_vs_default_pct']:+.2f}% makespan)")
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps({"workload": name, "seeds": list(seeds),
                                                "grid": grid, "rows": rows}, indent=1))
    console.print(f"wrote {out}/sweep.json")
    return rows


def best_rows(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The best row per policy. The selection rule: average completion and makespan weigh the
    same."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        p = str(r["policy"])
        score = r["avg_vs_default_pct"] + r["makespan_vs_default_pct"]
        if p not in out or score < out[p]["avg_vs_default_pct"] + out[p]["makespan_vs_default_pct"]:
            out[p] = r
    return out


def _paired(mx: Matrix, policy: str, metric: str) -> float:
    return mx.vs_default(policy, metric).mean
