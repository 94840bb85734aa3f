"""PNG plots of a simulation matrix: completion per job, CPU share per job, jobs per worker."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from specon.sim.model import RunResult
from specon.sim.runner import Matrix

COLORS = {
    "default": "#7f7f7f", "flowcon": "#1f77b4", "progress-equal-share": "#2ca02c",
    "progress": "#d62728", "las": "#9467bd", "slaq": "#8c564b", "oracle": "#000000",
    "paper": "#ff7f0e", "paper-specon": "#bcbd22",
}


def summary_plot(mx: Matrix, path: Path) -> None:
    """Average completion time and makespan per policy with 95% intervals."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric, title in ((axes[0], "avg_completion_s", "average completion time (s)"),
                              (axes[1], "makespan_s", "makespan (s)")):
        stats = [mx.metric(p, metric) for p in mx.policies]
        ax.bar(range(len(mx.policies)), [s.mean for s in stats],
               yerr=[s.ci95 for s in stats], capsize=4,
               color=[COLORS.get(p, "#17becf") for p in mx.policies])
        ax.set_xticks(range(len(mx.policies)), mx.policies, rotation=30, ha="right")
        ax.set_title(f"{title}, mean ± 95% CI over {len(mx.seeds)} seeds")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(mx.name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def completion_plot(mx: Matrix, path: Path, index: int = 0) -> None:
    """Completion time of every job under every policy (one seed)."""
    fig, ax = plt.subplots(figsize=(12, 4.5))
    base = mx.runs[mx.policies[0]][index]
    order = sorted(base.jobs, key=lambda j: (j.submit_s, j.name))
    names = [j.name for j in order]
    for k, p in enumerate(mx.policies):
        by = {j.name: j for j in mx.runs[p][index].jobs}
        xs = [i + (k - len(mx.policies) / 2) * 0.08 for i in range(len(names))]
        ys = [by[n].completion_s for n in names]
        ax.plot(xs, ys, "o", ms=4, label=p, color=COLORS.get(p, "#17becf"))
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
    ax.set_ylabel("completion time (s)")
    ax.set_title(f"completion time per job, seed {mx.seeds[index]} — {mx.name}")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(ncol=4, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _step_at(series: list[tuple[float, str, float]], grid: list[float], worker: str) -> list[float]:
    out, i, cur = [], 0, 0.0
    for t in grid:
        while i < len(series) and series[i][0] <= t:
            cur = series[i][2] if series[i][1] == worker else 0.0
            i += 1
        out.append(cur)
    return out


def cpu_share_plot(run: RunResult, cpus: dict[str, float], path: Path, title: str) -> None:
    """Cores used by each job over time, stacked, one panel per worker."""
    workers = sorted(run.cpu)
    end = max((j.finish_s or 0.0) for j in run.jobs)
    grid = [end * k / 400 for k in range(401)]
    fig, axes = plt.subplots(len(workers), 1, figsize=(11, 1.8 * len(workers) + 0.6),
                             sharex=True, squeeze=False)
    cmap = plt.get_cmap("tab20")
    jobs = sorted(run.shares)
    for ax, w in zip(axes[:, 0], workers, strict=True):
        layers, labels = [], []
        for k, name in enumerate(jobs):
            ys = _step_at(run.shares[name], grid, w)
            if any(ys):
                layers.append((ys, cmap(k % 20)))
                labels.append(name)
        if layers:
            ax.stackplot(grid, [ly[0] for ly in layers], colors=[ly[1] for ly in layers],
                         step="post")
        ax.set_ylim(0, cpus.get(w, 1.0) * 1.05)
        ax.set_ylabel(f"{w}\ncores", fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time (s)")
    fig.suptitle(f"CPU share per job over time — {title}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def jobs_per_worker_plot(run: RunResult, path: Path, title: str) -> None:
    """Jobs on each worker over time; migrations (x) and rebalancing moves (^) marked."""
    fig, ax = plt.subplots(figsize=(11, 4))
    end = max((j.finish_s or 0.0) for j in run.jobs)
    for w in sorted(run.counts):
        pts = run.counts[w] + [(end, run.counts[w][-1][1])]
        ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", label=w)
    for job in run.jobs:
        for m in job.migrations:
            marker = "x" if m["kind"] == "migrate" else "^"
            ax.plot([m["t"]], [0], marker, color="black", ms=7)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("jobs on the worker")
    ax.set_title(f"jobs per worker — {title} (x: migration, ^: rebalancing, at the bottom)")
    ax.grid(alpha=0.3)
    ax.legend(ncol=4, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_all(mx: Matrix, cpus: dict[str, float], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "summary.png", out / "completion.png"]
    summary_plot(mx, paths[0])
    completion_plot(mx, paths[1])
    for p in mx.policies:
        if p == "oracle":
            continue
        run = mx.runs[p][0]
        safe = p.replace("+", "-")
        if run.shares:
            cpu_path = out / f"cpu-share-{safe}.png"
            cpu_share_plot(run, cpus, cpu_path, f"{p}, seed {run.seed}")
            paths.append(cpu_path)
        jobs_path = out / f"jobs-per-worker-{safe}.png"
        jobs_per_worker_plot(run, jobs_path, f"{p}, seed {run.seed}")
        paths.append(jobs_path)
    return paths
