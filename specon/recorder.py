"""The profile recorder: runs a real training job that honours the training contract and
writes its measured profile (loss curve, speed per core count, checkpoint cost) in format v1.

`specon profile record --name vae-digits -- python -m specon_examples.vae`

Exit codes (`specon profile record`): 2 for bad input (a flag, a value, no command, a command
that cannot be found), said in one line; 1 when the job fails, reports no progress records or
no finite loss, or cannot be timed; 0 when the profile is written."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from specon.sdk.checkpoint import ENV_CHECKPOINT_DIR, EXIT_STOPPED
from specon.sdk.progress import ENV_PROGRESS_FILE

app = typer.Typer(help="Record training-job profiles (format v1).", no_args_is_help=True)


@app.callback()
def _profile() -> None:
    """Record training-job profiles (format v1)."""


class RecordError(RuntimeError):
    """The job did not behave as the contract says (said once, with what to do)."""


def available_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux: no pinning, count only
        return list(range(os.cpu_count() or 1))


def default_cores(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    cores, k = [], 1
    while k < n:
        cores.append(k)
        k *= 2
    cores.append(n)
    return cores


def even_sample(values: Sequence[float], limit: int) -> list[float]:
    """At most `limit` values, evenly spaced, always keeping the first and the last."""
    n = len(values)
    if n <= limit:
        return list(values)
    if limit < 2:
        return [values[-1]]
    return [values[round(i * (n - 1) / (limit - 1))] for i in range(limit)]


@dataclass
class Progress:
    """The records read so far from one run's progress file."""

    path: Path
    offset: int = 0
    partial: str = ""
    records: list[dict[str, Any]] = field(default_factory=list)

    def poll(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, encoding="utf-8") as f:
                f.seek(self.offset)
                chunk = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return []
        text = self.partial + chunk
        lines = text.split("\n")
        self.partial = lines.pop()
        new = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                new.append(record)
        self.records.extend(new)
        return new

    def progress(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("event") == "progress"]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("event") == name]


@dataclass
class Finished:
    returncode: int
    max_rss_kb: int
    seconds: float


class Job:
    """One run of the command, pinned to `cpus`, with its own progress file."""

    def __init__(self, command: Sequence[str], cpus: Sequence[int], workdir: Path,
                 checkpoint_dir: Path, tag: str) -> None:
        self.progress = Progress(workdir / f"progress-{tag}.jsonl")
        env = dict(os.environ)
        env[ENV_PROGRESS_FILE] = str(self.progress.path)
        env[ENV_CHECKPOINT_DIR] = str(checkpoint_dir)
        # Frameworks that size their pools from these rather than from the affinity mask.
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(len(cpus))
        self.log_path = workdir / f"log-{tag}.txt"
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        cpu_set = set(cpus)

        def pin() -> None:
            if hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, cpu_set)

        self.started = time.perf_counter()
        try:
            self.proc = subprocess.Popen(
                list(command), env=env, stdout=self._log, stderr=subprocess.STDOUT,
                preexec_fn=pin,
            )
        except OSError as exc:
            self._log.close()
            raise RecordError(f"cannot start {command[0]!r}: {exc.strerror or exc}") from exc
        self.finished: Finished | None = None

    def poll(self) -> Finished | None:
        self.progress.poll()
        if self.finished is None:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid != 0:
                code = os.waitstatus_to_exitcode(status)
                self.proc.returncode = code
                self.finished = Finished(code, int(usage.ru_maxrss),
                                         time.perf_counter() - self.started)
                self._log.close()
                self.progress.poll()
        return self.finished

    def wait(self, timeout: float) -> Finished:
        deadline = time.perf_counter() + timeout
        while (done := self.poll()) is None:
            if time.perf_counter() > deadline:
                self.proc.kill()
                raise RecordError(f"the job ran past {timeout:.0f} s; see {self.log_path}")
            time.sleep(0.05)
        return done

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        """Poll until predicate(self) holds (True) or the job ends first (False)."""
        deadline = time.perf_counter() + timeout
        while True:
            done = self.poll()
            if predicate(self):
                return True
            if done is not None:
                return False
            if time.perf_counter() > deadline:
                self.proc.kill()
                raise RecordError(f"the job ran past {timeout:.0f} s; see {self.log_path}")
            time.sleep(0.02)

    def tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""


def seconds_per_iteration(records: Sequence[dict[str, Any]]) -> float | None:
    """Wall seconds per iteration between the first and the last record given."""
    if len(records) < 2:
        return None
    first, last = records[0], records[-1]
    steps = int(last["step"]) - int(first["step"])
    if steps <= 0:
        return None
    return (float(last["time"]) - float(first["time"])) / steps


@dataclass
class Sample:
    cores: int
    seconds_per_iteration: float | None
    checkpoint_seconds: list[float]
    checkpoint_bytes: list[int]
    restore_seconds: list[float]


def timing_sample(command: Sequence[str], cpus: Sequence[int], workdir: Path, tag: str,
                  window: float, timeout: float) -> Sample:
    """Time a window of steady training, stop with SIGTERM (a save), restart (a restore),
    stop again (another save). Checkpoint figures come from the SDK's own events."""
    ckpt_dir = workdir / f"ckpt-{tag}"
    job = Job(command, cpus, workdir, ckpt_dir, f"{tag}-a")

    def window_done(j: Job) -> bool:
        recs = j.progress.progress()
        return len(recs) >= 3 and float(recs[-1]["time"]) - float(recs[1]["time"]) >= window

    job.wait_for(window_done, timeout)
    # The first record carries start-up effects (allocator, caches): the window starts after.
    rate = seconds_per_iteration(job.progress.progress()[1:])
    sample = Sample(len(cpus), rate, [], [], [])
    if job.poll() is not None:
        return sample  # too short a job to stop: timing only
    job.proc.send_signal(signal.SIGTERM)
    first = job.wait(timeout)
    saves = job.progress.events("checkpoint")
    if first.returncode != EXIT_STOPPED or not saves:
        return sample  # the job does not checkpoint: timing only
    sample.checkpoint_seconds.append(float(saves[-1]["seconds"]))
    sample.checkpoint_bytes.append(int(saves[-1]["bytes"]))
    again = Job(command, cpus, workdir, ckpt_dir, f"{tag}-b")
    if again.wait_for(lambda j: bool(j.progress.events("resume")), timeout):
        sample.restore_seconds.append(float(again.progress.events("resume")[-1]["seconds"]))
        if again.poll() is None:
            again.proc.send_signal(signal.SIGTERM)
    again.wait(timeout)
    for event in again.progress.events("checkpoint"):
        if event.get("reason") == "sigterm":
            sample.checkpoint_seconds.append(float(event["seconds"]))
            sample.checkpoint_bytes.append(int(event["bytes"]))
    return sample


@dataclass
class Reference:
    """The full run on one core: the loss curve and the whole-run speed."""

    losses: list[float]
    iterations: int
    seconds_per_iteration: float | None
    finished: Finished
    dropped: int


def reference_run(command: Sequence[str], cpu: int, workdir: Path,
                  timeout: float = 1800.0) -> Reference:
    """Run the job to completion pinned to one CPU and read its progress records."""
    job = Job(command, [cpu], workdir, workdir / "ckpt-ref", "ref")
    done = job.wait(timeout)
    if done.returncode != 0:
        tail = job.tail().rstrip()
        raise RecordError(f"the job exited with {done.returncode}"
                          + (f"; the end of its output:\n{tail}" if tail
                             else " and printed nothing"))
    progress = job.progress.progress()
    if not progress:
        raise RecordError(
            f"the job reported no progress records to ${ENV_PROGRESS_FILE}: the recorder reads "
            "that file, not printed loss lines; report each step with specon.sdk.report(loss, "
            "step=...) (see docs/training-contract.md)"
        )
    losses = [float(r["loss"]) for r in progress
              if isinstance(r.get("loss"), int | float) and math.isfinite(r["loss"])]
    if not losses:
        raise RecordError(f"the job's {len(progress)} progress record(s) carry no finite loss "
                          "(report(loss, step=...); see docs/training-contract.md)")
    return Reference(losses, int(progress[-1]["step"]), seconds_per_iteration(progress[1:]),
                     done, len(progress) - len(losses))


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _round(value: float, digits: int = 4) -> float:
    """Round to `digits` significant figures (timings are not more precise than that)."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def record_profile(
    command: Sequence[str],
    name: str,
    cores: Sequence[int],
    repeats: int = 3,
    window: float = 6.0,
    max_points: int = 400,
    timeout: float = 1800.0,
    workdir: Path | None = None,
    echo: Any = print,
) -> dict[str, Any]:
    """Measure the job and return the profile (a plain dict in the v1 field order)."""
    cpus = available_cpus()
    cores = sorted({k for k in cores if 1 <= k <= len(cpus)})
    if not cores or cores[0] != 1:
        raise RecordError("the core counts must include 1 (speedup is relative to one core)")
    with tempfile.TemporaryDirectory(prefix="specon-record-") as tmp:
        work = Path(workdir) if workdir is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)

        echo(f"reference run on 1 core: {' '.join(command)}")
        ref = reference_run(command, cpus[0], work, timeout)
        if ref.dropped:
            echo(f"warning: {ref.dropped} non-finite losses left out")
        done = ref.finished
        iterations = ref.iterations
        losses = ref.losses
        full_rate = ref.seconds_per_iteration
        echo(f"  {iterations} iterations in {done.seconds:.1f} s, "
             f"{len(losses)} losses, max RSS {done.max_rss_kb / 1024:.0f} MB")

        samples: list[Sample] = []
        for r in range(repeats):
            for k in cores:  # interleaved, so that drift in the machine's load hits all alike
                s = timing_sample(command, cpus[:k], work, f"k{k}-r{r}", window, timeout)
                echo(f"  {k} core(s), repeat {r + 1}: "
                     + (f"{s.seconds_per_iteration * 1000:.3f} ms/iteration"
                        if s.seconds_per_iteration else "no timing")
                     + (f", save {s.checkpoint_seconds} s" if s.checkpoint_seconds else "")
                     + (f", restore {s.restore_seconds} s" if s.restore_seconds else ""))
                samples.append(s)

    def rates(k: int) -> list[float]:
        return [s.seconds_per_iteration for s in samples
                if s.cores == k and s.seconds_per_iteration is not None]

    one = rates(1)
    base = _median(one)
    if base is None:
        raise RecordError("no timing window could be measured at 1 core (job too short?)")
    speedup: dict[str, float] = {}
    for k in cores:
        mk = _median(rates(k))
        if mk is not None:
            speedup[str(k)] = 1.0 if k == 1 else round(base / mk, 3)
    per_iteration = _median([*one, full_rate] if full_rate is not None else one)
    assert per_iteration is not None
    profile: dict[str, Any] = {
        "name": name,
        "iterations": iterations,
        "loss": even_sample(losses, max_points),
        "cpu_seconds_per_iteration": _round(per_iteration),
        "speedup": speedup,
    }
    saves = [x for s in samples for x in s.checkpoint_seconds]
    restores = [x for s in samples for x in s.restore_seconds]
    sizes = [x for s in samples for x in s.checkpoint_bytes]
    if saves and restores and sizes:
        profile["checkpoint_seconds"] = _round(statistics.median(saves))
        profile["restore_seconds"] = _round(statistics.median(restores))
        profile["checkpoint_bytes"] = int(statistics.median(sizes))
    else:
        echo("warning: the job did not checkpoint and resume by the contract; "
             "the profile has no checkpoint figures (it cannot be migrated)")
    profile["memory_mb"] = max(1, round(done.max_rss_kb / 1024))
    return profile


def _parse_cores(text: str | None) -> list[int]:
    n = len(available_cpus())
    if not text:
        return default_cores(n)
    try:
        cores = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a comma-separated list of core counts, "
                                 "e.g. 1,2,4", param_hint="'--cores'") from None
    if 1 not in cores:
        raise typer.BadParameter("must include 1 (speedup is relative to one core)",
                                 param_hint="'--cores'")
    if any(not 1 <= k <= n for k in cores):
        raise typer.BadParameter(f"each count must be between 1 and the {n} CPU(s) this "
                                 f"process may run on, got {text!r}", param_hint="'--cores'")
    return cores


def default_name(command: Sequence[str]) -> str:
    """A profile name from the command: the module's last part for `python -m pkg.mod` (mod),
    else the file name without its extension of the first argument that names a script
    (`python3 train.py` gives train), else of the program itself; lower-cased, with each run
    of characters other than a-z, 0-9, '_' and '-' made one '-'."""
    args = list(command)
    stem = Path(args[0]).stem if args else ""
    for i, arg in enumerate(args[1:], start=1):
        module = args[i + 1] if arg == "-m" and i + 1 < len(args) else (
            arg[2:] if arg.startswith("-m") and len(arg) > 2 else None)
        if module is not None:
            parts = [p for p in module.split(".") if p and p != "__main__"]
            stem = parts[-1] if parts else stem
            break
        if not arg.startswith("-") and Path(arg).suffix in (".py", ".sh"):
            stem = Path(arg).stem
            break
    name = re.sub(r"[^a-z0-9_-]+", "-", stem.lower()).strip("-_")
    return name or "profile"


def _usable_command(command: Sequence[str]) -> None:
    if not command:
        raise typer.BadParameter(
            "give the job's command after --, e.g. specon profile record -- python3 train.py",
            param_hint="'command'")
    program = command[0]
    found = shutil.which(program) if os.sep not in program else (
        program if os.access(program, os.X_OK) and not os.path.isdir(program) else None)
    if found is None:
        raise typer.BadParameter(f"{program!r} is not an executable program"
                                 + ("" if os.sep in program else " on PATH"),
                                 param_hint="'command'")


def _check(flag: str, ok: bool, need: str, value: object) -> None:
    if not ok:
        raise typer.BadParameter(f"must be {need}, got {value}", param_hint=f"'{flag}'")


@app.command("record")
def record(
    command: Annotated[list[str] | None, typer.Argument(
        help="the job's command, after --", show_default=False)] = None,
    name: Annotated[str | None, typer.Option(
        help="profile name, e.g. vae-digits (default: from the command: the module's last "
        "part for `python3 -m pkg.mod`, e.g. vae for `python3 -m specon_examples.vae`, else "
        "the script's (or the program's) file name without its extension, lower-cased; other "
        "characters become '-')",
        show_default=False)] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="where to write the profile (default: NAME.json)")] = None,
    cores: Annotated[str | None, typer.Option(
        help="core counts to time, comma-separated (default: 1, 2, 4, ... up to this machine's)"
    )] = None,
    repeats: Annotated[int, typer.Option(help="timing repeats per core count (median)")] = 3,
    window: Annotated[float, typer.Option(help="seconds of training per timing sample")] = 6.0,
    max_points: Annotated[int, typer.Option(help="most loss values kept (evenly spaced)")] = 400,
    timeout: Annotated[float, typer.Option(help="seconds before one run counts as hung")] = 1800,
) -> None:
    """Run a training job and write its profile (format v1).

    The job must honour docs/training-contract.md: the recorder gives it its own progress
    file and checkpoint directory, pins it to 1, 2, ... cores, stops it with SIGTERM and
    restarts it to time a checkpoint and a restore. Exit code 2 for bad input (said in one
    line), 1 when the job fails or reports no progress, 0 when the profile is written."""
    # bad input is refused before the job runs (a recording takes minutes)
    _usable_command(command or [])
    assert command
    core_counts = _parse_cores(cores)
    _check("--repeats", repeats >= 1, "at least 1", repeats)
    _check("--window", math.isfinite(window) and window > 0, "a positive number of seconds",
           window)
    _check("--max-points", max_points >= 2, "at least 2", max_points)
    _check("--timeout", math.isfinite(timeout) and timeout > 0, "a positive number of seconds",
           timeout)
    named = name is not None
    name = default_name(command) if name is None else name
    _check("--name", bool(name.strip()), "a non-empty name", repr(name))
    path = output if output is not None else Path(f"{name}.json")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise typer.BadParameter(f"cannot create {path.parent} ({exc.strerror or exc})",
                                 param_hint="'--output'") from None
    if path.is_dir() or not os.access(path.parent, os.W_OK):
        raise typer.BadParameter(f"cannot write {path}", param_hint="'--output'")
    if not named:
        typer.echo(f"profile name: {name} (from the command; --name to change it)", err=True)
    try:
        profile = record_profile(command, name, core_counts, repeats, window,
                                 max_points, timeout, echo=lambda m: typer.echo(m, err=True))
        path.write_text(json.dumps(profile, indent=1) + "\n")
    except (RecordError, OSError) as exc:
        text = (f"cannot write {path} ({exc.strerror or exc})" if isinstance(exc, OSError)
                else str(exc))
        typer.echo(f"error: {text}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"wrote {path}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
