"""The `specon` command line: simulate workloads and experiments, record profiles."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from specon import defaults
from specon.core.policy import DEPRECATED_NAMES, POLICIES, renamed
from specon.sim.experiments import DEFAULT_EXPERIMENT, EXPERIMENTS
from specon.sim.model import SimConfig
from specon.sim.progress import LineProgress
from specon.sim.runner import Matrix, run_matrix
from specon.version import version
from specon.workload.load import WorkloadError, load_workload
from specon.workload.models import Workload

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="SpeCon: progress-aware scheduling of deep-learning training. "
    "Simulate what it would do for your jobs before installing it.",
)
console = Console(width=None if sys.stdout.isatty() else 180)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 180)


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit code 2."""


def _show_version(value: bool) -> None:
    if value:
        print(f"specon {version()}")
        raise typer.Exit()


@app.callback()
def _main(
    show_version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_show_version,
        help="Print the version and exit.")] = False,
) -> None:
    # the options that come before any command (the help text is the app's)
    pass


def _seeds(text: str) -> list[int]:
    text = text.strip()
    try:
        if "," in text or "-" in text[1:]:
            out: list[int] = []
            for part in text.split(","):
                if "-" in part[1:]:
                    a, b = part.split("-", 1)
                    out.extend(range(int(a), int(b) + 1))
                else:
                    out.append(int(part))
            if not out:
                raise ValueError
            return out
        n = int(text)
    except ValueError:
        raise UsageError(
            f"--seeds: {text!r} is neither a count (5) nor a list (1,2,3 or 0-4)"
        ) from None
    if n < 1:
        raise UsageError("--seeds: the count must be at least 1")
    return list(range(n))


def _policies(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    for p in dict.fromkeys(names):  # an old name: one warning line, then its new name
        notice = renamed(p)
        if notice is not None:
            err.print(f"warning: {notice}", markup=False, highlight=False, soft_wrap=True)
    names = list(dict.fromkeys(DEPRECATED_NAMES.get(p, p) for p in names))
    for p in names:
        if p not in POLICIES:
            raise UsageError(f"--policies: unknown policy {p!r} (known: {', '.join(POLICIES)})")
    if not names:
        raise UsageError("--policies: name at least one policy")
    if "oracle" in names:  # the headroom line always comes last
        names = [p for p in names if p != "oracle"] + ["oracle"]
    return names


def _target(target: str) -> tuple[str, object]:
    if target in EXPERIMENTS:
        return target, EXPERIMENTS[target].build
    path = Path(target)
    if not path.exists():
        known = ", ".join(EXPERIMENTS)
        raise UsageError(f"{target}: no such workload file or built-in experiment ({known})")
    wl = load_workload(path)
    return path.stem, (lambda seed, _wl=wl: _wl)


def _config(
    alpha: float | None, interval: float | None, beta: float | None, timeline: bool,
    manager_view: bool = False, unlabelled: bool = False, unmeasured: bool = False,
) -> SimConfig:
    base = SimConfig()
    if beta is not None and not (math.isfinite(beta) and beta >= 1):
        raise UsageError(f"--beta: must be a number >= 1, got {beta}")
    if unlabelled and not manager_view:
        raise UsageError("--unlabelled: only with --manager-view")
    if unmeasured and not unlabelled:
        raise UsageError("--unmeasured: only with --unlabelled")
    try:
        return SimConfig(
            alpha=base.alpha if alpha is None else alpha,
            interval_s=base.interval_s if interval is None else interval,
            flowcon_beta=base.flowcon_beta if beta is None else beta,
            record_timeline=timeline, manager_view=manager_view,
            labelled_speeds=not unlabelled, measured_speeds=not unmeasured,
        )
    except ValueError as exc:
        flag = "--interval" if "interval" in str(exc) else "--alpha"
        raise UsageError(f"{flag}: {exc}") from None


def _fmt(v: float, digits: int = 1) -> str:
    return "—" if not math.isfinite(v) else f"{v:.{digits}f}"


def _pct(v: float) -> str:
    return "—" if not math.isfinite(v) else f"{v:+.1f}%"


def _summary_table(mx: Matrix) -> Table:
    t = Table(title=f"{mx.name}: mean over {len(mx.seeds)} seed(s), ± 95% interval",
              title_justify="left")
    first = mx.runs[mx.policies[0]][0].summary()
    qos = [k for k in ("targets", "deadlines") if first[k]]
    for col in ("policy", "avg completion s", "vs default", "p50 s", "p95 s", "makespan s",
                "vs default", "time to 90% s", "vs default", "migrations",
                "headroom captured: avg", "t90",
                *(f"{k} met" for k in qos)):
        t.add_column(col, justify="left" if col == "policy" else "right")
    for p in mx.policies:
        avg = mx.metric(p, "avg_completion_s")
        mk = mx.metric(p, "makespan_s")
        is_ref = p in ("default", "oracle")
        t.add_row(
            p + (" (lower bound)" if p == "oracle" else ""),
            f"{_fmt(avg.mean)} ± {_fmt(avg.ci95)}",
            "" if is_ref else _pct(mx.vs_default(p, "avg_completion_s").mean),
            _fmt(mx.metric(p, "p50_completion_s").mean),
            _fmt(mx.metric(p, "p95_completion_s").mean),
            f"{_fmt(mk.mean)} ± {_fmt(mk.ci95)}",
            "" if is_ref else _pct(mx.vs_default(p, "makespan_s").mean),
            _fmt(mx.metric(p, "avg_time_to_90_s").mean),
            "" if is_ref else _pct(mx.vs_default(p, "avg_time_to_90_s").mean),
            _fmt(mx.metric(p, "migrations").mean),
            "" if is_ref else _pct(mx.headroom(p, "avg_completion_s").mean).lstrip("+"),
            "" if is_ref else _pct(mx.headroom(p, "avg_time_to_90_s").mean).lstrip("+"),
            *(f"{mx.metric(p, k + '_met').mean:.1f} / {first[k]}" for k in qos),
        )
    return t


def _jobs_table(mx: Matrix) -> Table:
    seed = mx.seeds[0]
    t = Table(title=f"completion time per job (s), seed {seed}", title_justify="left")
    t.add_column("job")
    t.add_column("profile")
    t.add_column("submit s", justify="right")
    for p in mx.policies:
        t.add_column(p, justify="right")
    first = mx.runs[mx.policies[0]][0]
    by = {p: {j.name: j for j in mx.runs[p][0].jobs} for p in mx.policies}
    for j in sorted(first.jobs, key=lambda j: (j.submit_s, j.name)):
        cells = []
        for p in mx.policies:
            jr = by[p][j.name]
            moved = sum(1 for m in jr.migrations if m.get("kind") in ("migrate", "rebalance"))
            cells.append(_fmt(jr.completion_s) + ("*" * moved))
        t.add_row(j.name, j.profile, _fmt(j.submit_s), *cells)
    t.caption = "* = moved once (migration or rebalancing)"
    return t


def _progress() -> Progress | LineProgress:
    """rich's bar on a terminal; to a log or a pipe, a plain line every ~10 s on stderr."""
    if not err.is_terminal:
        return LineProgress("simulate")
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=err, transient=True)


def _finite(value: Any) -> Any:
    """Strict JSON: NaN and infinities (a metric with no value) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _comparison(mx: Matrix, written: list[Path]) -> dict[str, Any]:
    """What `--json` prints: per policy, each metric's mean and 95% interval, its paired
    change against default and the share of the oracle's headroom captured; per run, the
    summary. Per-job results are in result.json."""
    full = mx.to_json(include_timelines=False)
    out: dict[str, Any] = _finite({
        "format": "specon-comparison/v1",
        "workload": mx.name, "seeds": mx.seeds, "policies": mx.policies,
        "config": full["config"], "aggregate": full["aggregate"],
        "runs": [{"policy": r["policy"], "seed": r["seed"], "summary": r["summary"]}
                 for r in full["runs"]],
        "files": [str(p) for p in written],
    })
    return out


def _writable_dir(flag: str, path: Path) -> None:
    """Create the output folder now, so that a bad --out fails before a long run, not after."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag}: cannot create {path} ({exc.strerror or exc})") from None


_ALPHA_HELP = f"Threshold: normalised loss progress per minute (default {defaults.ALPHA:g})."
_INTERVAL_HELP = f"Categorisation / FlowCon interval, seconds (default {defaults.INTERVAL_S:g})."
_BETA_HELP = f"FlowCon floor: a limit stays >= 1/(beta*n) (default {defaults.FLOWCON_BETA:g})."


@app.command()
def simulate(
    target: Annotated[str, typer.Argument(
        help=f"A workload file, or a built-in experiment: {', '.join(EXPERIMENTS)}.")
    ] = DEFAULT_EXPERIMENT,
    policies: Annotated[str, typer.Option(
        help="Comma-separated policies, or 'auto': every policy, with dqoes, deadline and "
        "agent-qos only when the workload has targets or deadlines.")] = "auto",
    seeds: Annotated[str, typer.Option(help="A count (5 = seeds 0-4) or a list (1,2,7 or 0-9).")
                     ] = "5",
    alpha: Annotated[float | None, typer.Option(help=_ALPHA_HELP)] = None,
    interval: Annotated[float | None, typer.Option(help=_INTERVAL_HELP)] = None,
    beta: Annotated[float | None, typer.Option(help=_BETA_HELP)] = None,
    out: Annotated[Path | None, typer.Option(help="Output folder (default results/NAME).")
                   ] = None,
    sweep: Annotated[str | None, typer.Option(
        help="Parameter sweep, e.g. 'alpha=0.01,0.05,0.1 interval=20,30,60'.")] = None,
    plots: Annotated[bool, typer.Option(help="Draw PNG plots.")] = True,
    jobs: Annotated[bool, typer.Option(help="Print the per-job table.")] = True,
    manager_view: Annotated[bool, typer.Option(
        help="Placement and moves see what the installed manager sees: no speed-up tables, a "
        "new job as the typical one, node speeds as labelled (docs/results.md).")] = False,
    unlabelled: Annotated[bool, typer.Option(
        help="With --manager-view: no node carries specon.io/cpu-speed (each node's speed as "
        "its agent measured it).")] = False,
    unmeasured: Annotated[bool, typer.Option(
        help="With --unlabelled: no agent measured its node's speed either (every node at "
        "speed 1).")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the comparison as JSON on stdout instead of the tables (per "
        "policy: each metric's mean, 95% interval, change against default, headroom captured; "
        "a sweep's rows and best settings); progress and notes go to stderr; files are written "
        "as without it.")] = False,
) -> None:
    """Compare scheduling policies on a workload, side by side, over several seeds."""
    name, build = _target(target)
    seed_list = _seeds(seeds)
    if policies == "auto":
        sample: Workload = build(seed_list[0])  # type: ignore[operator]
        skip = set()
        if not any(j.target_loss is not None for j in sample.jobs):
            skip.add("dqoes")
        if not any(j.deadline_s is not None for j in sample.jobs):
            skip.add("deadline")
        if {"dqoes", "deadline"} <= skip:
            skip.add("agent-qos")
        policies = ",".join(p for p in POLICIES if p not in skip)
    pols = _policies(policies)
    out_dir = out or Path("results") / name
    say = err if as_json else console  # with --json, stdout holds the JSON alone
    if sweep:
        from specon.sim.sweep import best_rows, parse_sweep, run_sweep

        grid = parse_sweep(sweep)
        if manager_view or unlabelled or unmeasured:
            raise UsageError("--manager-view: not used with --sweep")
        for flag, value in (("--alpha", alpha), ("--interval", interval), ("--beta", beta)):
            if value is not None:
                raise UsageError(f"{flag}: not used with --sweep (sweep it instead: "
                                 f"--sweep '{flag[2:]}=V1,V2')")
        _writable_dir("--out", out_dir)
        rows = run_sweep(name, build, pols, seed_list, grid, out_dir,  # type: ignore[arg-type]
                         Console(quiet=True) if as_json else console, _progress())
        if as_json:
            print(json.dumps(_finite({
                "format": "specon-sweep/v1", "workload": name, "seeds": seed_list,
                "grid": grid, "rows": rows, "best": best_rows(rows),
                "files": [str(out_dir / "sweep.json")]}), indent=1))
        return
    cfg = _config(alpha, interval, beta, timeline=plots, manager_view=manager_view,
                  unlabelled=unlabelled, unmeasured=unmeasured)
    _writable_dir("--out", out_dir)
    position = {s: i + 1 for i, s in reversed(list(enumerate(seed_list)))}
    with _progress() as prog:
        task = prog.add_task(name, total=len(pols) * len(seed_list))
        mx = run_matrix(
            name, build, pols, seed_list, cfg,  # type: ignore[arg-type]
            tick=lambda p, s: prog.advance(task),
            start=lambda p, s: prog.update(
                task, status=f"seed {position[s]}/{len(seed_list)}, policy {p}"),
            job_done=prog.jobs if isinstance(prog, LineProgress) else None)
    wl: Workload = build(seed_list[0])  # type: ignore[operator]
    if jobs and not as_json:
        console.print(_jobs_table(mx))
    if not as_json:
        console.print(_summary_table(mx))
    if target not in EXPERIMENTS and len(seed_list) > 1:
        say.print(f"note: {target} is the same workload for every seed; the seeds change "
                  "only random tie-breaks (the default scheduler's among equally loaded "
                  "workers), so the ± intervals measure that noise, not other workloads. "
                  "For that, run benchmarks/suite.py or `specon generate` several files.")
    (out_dir / "result.json").write_text(json.dumps(mx.to_json(include_timelines=plots)))
    written = [out_dir / "result.json"]
    if plots:
        from specon.sim.plots import write_all

        cpus = {w.name: w.cpus for w in wl.cluster.workers}
        written += write_all(mx, cpus, out_dir)
    say.print(f"wrote {len(written)} files to {out_dir}/ (result.json"
              + (", summary.png, completion.png, cpu-share-*.png, jobs-per-worker-*.png)"
                 if plots else ")"))
    if as_json:
        print(json.dumps(_comparison(mx, written), indent=1))


def _range(flag: str, text: str, integer: bool) -> tuple[float, float]:
    try:
        lo_s, _, hi_s = text.partition("-") if not text.startswith("-") else ("", "", "")
        lo = float(lo_s)
        hi = float(hi_s) if hi_s else lo
        if integer and (lo != int(lo) or hi != int(hi)):
            raise ValueError
    except ValueError:
        kind = "whole numbers" if integer else "numbers"
        raise UsageError(f"{flag}: {text!r} is not a range of {kind} like 3-16") from None
    return lo, hi


@app.command()
def generate(
    seed: Annotated[int, typer.Argument(help="The workload's seed (one seed, one workload).")],
    out: Annotated[Path | None, typer.Option(help="Write here (default: standard output).")
                   ] = None,
    workers: Annotated[str, typer.Option(help="Workers per cluster, a range.")] = "3-16",
    cpus: Annotated[str, typer.Option(help="CPUs per worker, a range (2, 4, 8, 16, 32 "
                                      "within it).")] = "2-32",
    speed: Annotated[str, typer.Option(help="Per-core speed of a worker, a range.")
                     ] = "0.5-2",
    jobs: Annotated[str, typer.Option(help="Jobs per workload, a range.")] = "15-60",
    minutes: Annotated[str, typer.Option(help="One-core run time of a job, minutes.")
                       ] = "2-60",
    load: Annotated[str, typer.Option(help="Offered load: one-core work over the cluster's "
                                      "capacity during the arrivals.")] = "0.4-2",
) -> None:
    """Write a random workload (the suite's generator, docs/experiments.md)."""
    from specon.sim.experiments import shipped_profiles
    from specon.sim.generate import Shape
    from specon.sim.generate import generate as make

    ranges = {
        "workers": _range("--workers", workers, True), "cpus": _range("--cpus", cpus, True),
        "speed": _range("--speed", speed, False), "jobs": _range("--jobs", jobs, True),
        "minutes": _range("--minutes", minutes, False), "load": _range("--load", load, False),
    }
    try:
        shape = Shape(**{k: (int(v[0]), int(v[1])) if k in ("workers", "cpus", "jobs") else v
                         for k, v in ranges.items()})  # type: ignore[arg-type]
    except ValueError as exc:
        raise UsageError(f"--{str(exc).split(':')[0]}: {str(exc).split(': ', 1)[-1]}") from None
    text = json.dumps(make(seed, shipped_profiles(), shape), indent=1)
    if out is None:
        print(text)
    else:
        try:
            out.write_text(text + "\n")
        except OSError as exc:
            raise UsageError(f"--out: cannot write {out} ({exc.strerror or exc})") from None
        err.print(f"wrote {out}")


@app.command()
def experiments() -> None:
    """List the built-in experiments."""
    t = Table("name", "what")
    for e in EXPERIMENTS.values():
        t.add_row(e.name + (" (default)" if e.name == DEFAULT_EXPERIMENT else ""), e.summary)
    console.print(t)


@app.command()
def validate(path: Path) -> None:
    """Check a workload file and say what it holds."""
    wl = load_workload(path)
    console.print(f"{path}: ok — {len(wl.jobs)} jobs, {len(wl.profiles)} profiles, "
                  f"{len(wl.cluster.workers)} workers")


try:  # the profile recorder (training side) registers itself when present
    from specon.recorder import app as _recorder_app

    app.add_typer(_recorder_app, name="profile", help="Record a job's profile.")
except ImportError:  # pragma: no cover - only while the recorder is absent
    pass


import specon.whatif_cmd as _whatif  # noqa: E402  (registers `specon whatif` on app)


def _fail(message: str, code: int) -> NoReturn:
    err.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    sys.exit(code)


def main() -> None:
    """Exit codes: 0 done; 2 bad input (a flag, a value, a file), said in one line naming it;
    1 a failure (a recorded job that fails, a file that cannot be written); 130 interrupted."""
    try:
        code = app(prog_name="specon", standalone_mode=False)
    except (UsageError, WorkloadError) as exc:
        _fail(str(exc), 2)
    except _whatif.Unreachable as exc:
        _fail(str(exc), 1)
    except typer.Abort:
        sys.exit(130)
    except OSError as exc:  # reading or writing a file failed midway
        where = f"{exc.filename}: " if exc.filename else ""
        _fail(f"{where}{exc.strerror or exc}", 1)
    except Exception as exc:
        # The parser's own errors (unknown flag, bad value, missing argument). Matched by
        # shape: typer raises click's classes or, from 0.2x on, those of its own copy of click.
        status = getattr(exc, "exit_code", None)
        message = getattr(exc, "format_message", None)
        if not (isinstance(status, int) and callable(message)):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `specon`: the help
            exc.show()  # type: ignore[attr-defined]
            sys.exit(status)
        command = getattr(getattr(exc, "ctx", None), "command_path", None)
        if command:
            _fail(f"{command}: {message()} (see '{command} --help')", status)
        _fail(str(message()), status)
    # without standalone mode, click returns a command's exit code instead of exiting
    sys.exit(code if isinstance(code, int) else 0)
