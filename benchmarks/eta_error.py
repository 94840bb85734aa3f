"""How far the agent's predicted completion (ETA) is from when real example jobs end.

Each example job (specon_examples, Debian's torch) runs for real, one thread, with its
iterations chosen from its shipped profile's cost per iteration so that it would last
``--seconds`` on the profiles' quiet host (longer on a busy one: 3-4x on a shared 2-core
machine); the jobs run ``--parallel`` at a time (they share this host's cores with each
other and with whatever else runs here, as jobs on a node do). Its progress file (the SDK's
records, each stamped with its wall time) is kept, and its real completion is the moment its
process exited.

The records are then replayed through the agent's own ETA code (specon_agent/eta.py) as the
agent reads them: a poll every ``poll_s`` of the agent's defaults, the step of the last record
written by then, the step rate over the default window (``qos_window_s``), the job's
iterations as its ``specon.io/total-steps``. At 25%, 50% and 75% of each job's run (process
start to exit) the ETA the agent would report at its last poll gives a predicted completion;
its error is ``|predicted − real| / (real − now)``, in % of the time the job really had left.
A point with no ETA yet (the rate needs half a window of steps) counts as "none".

Beside the shipped rule, a baseline replays the same records: the job's mean rate since its
first step (a window as long as the run).

``--save FILE`` keeps the recorded runs (every record's time and step, each job's start and
exit); ``--replay FILE...`` reads such files instead of running jobs (what
docs/results/eta-runs-*.json hold), so the table can be computed again without torch.

Usage: python benchmarks/eta_error.py [--jobs mlp,gru,birnn,dynrnn] [--seconds 30]
       [--parallel 2] [--save FILE.json] | --replay FILE.json...
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specon.sim.experiments import shipped_profiles  # noqa: E402
from specon_agent.eta import StepRate, eta_s  # noqa: E402
from specon_agent.loop_config import LoopConfig  # noqa: E402
from specon_examples import launch  # noqa: E402

POINTS = (0.25, 0.50, 0.75)
PROFILE = {"mlp": "mlp-digits", "gru": "gru-digits", "birnn": "birnn-digits",
           "rnn": "rnn-digits", "vae": "vae-digits", "dynrnn": "dynrnn-synthetic",
           "cnn": "cnn-synthetic", "charlm": "charlm-synthetic"}


@dataclass(frozen=True)
class Run:
    job: str
    iterations: int
    start: float  # wall clock, s
    end: float
    records: list[tuple[float, int]]  # (time, step) of each progress record


@dataclass(frozen=True)
class Point:
    job: str
    at: float  # share of the run
    left_s: float  # what it really had left
    eta_s: float | None  # what the agent said was left (None: no ETA yet)

    @property
    def error_pct(self) -> float | None:
        if self.eta_s is None:
            return None
        return 100.0 * abs(self.eta_s - self.left_s) / self.left_s


class MeanRate(StepRate):
    """The baseline: the mean rate since the first step (given once ``min_span_s`` of steps
    are seen, as the shipped rule after half its window)."""

    def __init__(self, min_span_s: float) -> None:
        super().__init__(math.inf)
        self.min_span_s = min_span_s

    def rate(self) -> float | None:
        if len(self.samples) < 2:
            return None
        a, b = self.samples[0], self.samples[-1]
        return None if b.t - a.t < self.min_span_s else max(0.0, b.step - a.step) / (b.t - a.t)


def replay(run: Run, poll_s: float, window_s: float,
           points: Sequence[float] = POINTS, mean: bool = False) -> list[Point]:
    """The agent's ETA at each point of ``run``, its records read at each poll (``mean``: the
    baseline's rate instead of the window's)."""
    rate = MeanRate(window_s / 2) if mean else StepRate(window_s)
    out: list[Point] = []
    records = sorted(run.records)
    i, step = 0, 0
    t = run.start
    todo = [(run.start + f * (run.end - run.start), f) for f in sorted(points)]
    while todo:
        while i < len(records) and records[i][0] <= t:
            step = max(step, records[i][1])
            i += 1
        rate.add(t, float(step))
        while todo and todo[0][0] < t + poll_s:  # the last poll before the point
            at, f = todo.pop(0)
            eta = eta_s(rate, run.iterations, None)
            said = None if eta is None or rate.last_t is None else rate.last_t + eta - at
            out.append(Point(run.job, f, run.end - at, said))
        t += poll_s
    return out


def record(job: str, seconds: float, python: str, workdir: Path) -> subprocess.Popen[bytes]:
    cost = shipped_profiles()[PROFILE[job]].cpu_seconds_per_iteration
    iterations = max(200, int(seconds / cost))
    progress = workdir / f"{job}.jsonl"
    proc = subprocess.Popen(
        launch.command(python, job, "--iterations", str(iterations), "--threads", "1",
                       "--seed", "1"),
        env=launch.env(SPECON_PROGRESS_FILE=str(progress)),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    proc.specon = (job, iterations, time.time(), progress)  # type: ignore[attr-defined]
    return proc


def finished(proc: subprocess.Popen[bytes]) -> Run:
    _, err = proc.communicate()
    end = time.time()
    job, iterations, start, progress = proc.specon  # type: ignore[attr-defined]
    if proc.returncode != 0:
        raise SystemExit(f"{job} failed ({proc.returncode}): {err.decode()[-2000:]}")
    records = []
    for line in progress.read_text().splitlines():
        r = json.loads(line)
        if r.get("event") == "progress":
            records.append((float(r["time"]), int(r["step"])))
    return Run(job, iterations, start, end, records)


def run_all(jobs: Sequence[str], seconds: float, parallel: int) -> list[Run]:
    python = launch.torch_python()
    if python is None:
        raise SystemExit("no interpreter with torch (docs/examples.md: Debian's python3-torch)")
    runs: list[Run] = []
    with tempfile.TemporaryDirectory() as d:
        waiting = list(jobs)
        running: list[subprocess.Popen[bytes]] = []
        while waiting or running:
            while waiting and len(running) < parallel:
                running.append(record(waiting.pop(0), seconds, python, Path(d)))
            done = next((p for p in running if p.poll() is not None), None)
            if done is None:
                time.sleep(0.2)
                continue
            running.remove(done)
            runs.append(finished(done))
    return runs


def save(runs: Sequence[Run], path: Path, note: str) -> None:
    path.write_text(json.dumps({"note": note, "runs": [asdict(r) for r in runs]}) + "\n")


def load(path: Path) -> list[Run]:
    return [Run(r["job"], r["iterations"], r["start"], r["end"],
                [(float(t), int(k)) for t, k in r["records"]])
            for r in json.loads(path.read_text())["runs"]]


def pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    return s[min(len(s) - 1, math.ceil(q * len(s)) - 1)]


def table(by_rule: dict[str, list[Point]]) -> str:
    lines = ["| rule | point of the run | jobs | ETA given | median error | p90 error |",
             "|---|---|---|---|---|---|"]
    for rule, points in by_rule.items():
        for f in POINTS:
            at = [p for p in points if p.at == f]
            errs = [e for p in at if (e := p.error_pct) is not None]
            lines.append(f"| {rule} | {f:.0%} | {len(at)} | {len(errs)} | "
                         f"{statistics.median(errs) if errs else math.nan:.1f}% | "
                         f"{pct(errs, 0.9):.1f}% |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", default="mlp,gru,birnn,dynrnn")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--save", type=Path)
    ap.add_argument("--replay", type=Path, nargs="+")
    a = ap.parse_args(argv)
    if a.replay:
        runs = [r for path in a.replay for r in load(path)]
    else:
        jobs = [j for j in a.jobs.split(",") if j]
        unknown = [j for j in jobs if j not in PROFILE]
        if unknown:
            ap.error(f"unknown jobs {unknown}; known: {', '.join(PROFILE)}")
        runs = run_all(jobs, a.seconds, max(1, a.parallel))
        if a.save is not None:
            save(runs, a.save, f"{time.strftime('%Y-%m-%d')}: --jobs {a.jobs} --seconds "
                 f"{a.seconds} --parallel {a.parallel}")
    cfg = LoopConfig(node="bench")
    by_rule = {
        f"shipped ({cfg.qos_window_s:.0f} s window)":
            [p for r in runs for p in replay(r, cfg.poll_s, cfg.qos_window_s)],
        "mean since start (baseline)":
            [p for r in runs for p in replay(r, cfg.poll_s, cfg.qos_window_s, mean=True)]}
    for r in runs:
        print(f"{r.job}: {r.iterations} iterations in {r.end - r.start:.1f} s, "
              f"{len(r.records)} records")
    for rule, points in by_rule.items():
        print(rule)
        for p in points:
            said = "none" if p.eta_s is None else f"{p.eta_s:.1f} s"
            err = "" if p.error_pct is None else f" ({p.error_pct:.1f}%)"
            print(f"  {p.job} at {p.at:.0%}: {p.left_s:.1f} s left, ETA {said}{err}")
    print(table(by_rule))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
