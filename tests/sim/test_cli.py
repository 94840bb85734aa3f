"""The `specon` command: exit code 2 and one line for bad input, 1 for a failure; results and
plots otherwise; `--json`, `--version`, and progress lines when stderr is not a terminal."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from synth import profile
from typer.testing import CliRunner

import specon as specon_package
from specon import cli
from specon.sim import progress


def specon(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specon", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


@pytest.fixture
def workload_file(tmp_path: Path) -> Path:
    data = {
        "format": "specon-workload/v1",
        "cluster": {"workers": [{"name": f"w{i}", "cpus": 2} for i in range(2)]},
        "profiles": {"fast": profile("fast", tau=0.08), "slow": profile("slow", tau=0.4)},
        "jobs": [{"name": f"j{i}", "profile": "slow" if i % 2 else "fast", "submit_s": 5.0 * i}
                 for i in range(8)],
    }
    path = tmp_path / "wl.json"
    path.write_text(json.dumps(data))
    return path


def test_simulate_writes_result_and_plots(workload_file: Path, tmp_path: Path):
    out = tmp_path / "out"
    r = specon("simulate", str(workload_file), "--seeds", "2", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "avg completion" in r.stdout and "progress" in r.stdout
    assert "[simulate]" not in r.stderr  # a run shorter than 10 s prints no progress line
    result = json.loads((out / "result.json").read_text())
    assert result["format"] == "specon-result/v1"
    assert set(result["aggregate"]) == {"default", "flowcon", "paper-specon", "paper",
                                        "progress-equal-share", "progress", "las", "slaq",
                                        "oracle"}
    run = result["runs"][0]
    job = run["jobs"][0]
    for key in ("submit_s", "start_s", "finish_s", "completion_s", "time_to_90_s", "migrations"):
        assert key in job
    assert run["cpu"] and run["jobs_per_worker"]
    for png in ("summary.png", "completion.png", "cpu-share-progress.png",
                "jobs-per-worker-progress-equal-share.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["simulate", "no-such-thing"], "no such workload file or built-in experiment"),
        (["simulate", "paper-30", "--alpha", "-1"], "--alpha"),
        (["simulate", "paper-30", "--interval", "0"], "--interval"),
        (["simulate", "paper-30", "--seeds", "x"], "--seeds"),
        (["simulate", "paper-30", "--policies", "fifo"], "unknown policy 'fifo'"),
        (["simulate", "paper-30", "--sweep", "gamma=1"], "unknown parameter 'gamma'"),
        (["simulate", "paper-30", "--beta", "0.5"], "--beta"),
        (["simulate", "--bogus-flag"], "specon simulate: No such option: --bogus-flag"),
        (["simulate", "paper-30", "--alpha", "abc"], "Invalid value for '--alpha'"),
        (["simulate", "paper-30", "--out", "/proc/no-such-dir/x"], "--out: cannot create"),
        (["simulate", "paper-30", "--sweep", "alpha=0.1", "--beta", "2"],
         "--beta: not used with --sweep"),
        (["simulate", "paper-30", "--seeds", "5-1"], "--seeds"),
        (["simulate", "paper-30", "--unlabelled"], "--unlabelled: only with --manager-view"),
        (["simulate", "paper-30", "--manager-view", "--sweep", "alpha=0.01,0.05"],
         "--manager-view: not used with --sweep"),
        (["validate"], "specon validate: Missing argument 'path'"),
        (["validate", "no-such.json"], "no-such.json: cannot read (No such file or directory)"),
        (["validate", "/"], "/: cannot read (Is a directory)"),
        (["validate", "a.json", "b.json"], "unexpected extra argument"),
        (["generate", "x"], "Invalid value for 'seed'"),
        (["generate", "1", "--out", "/proc/no-such-dir/x.json"], "--out: cannot write"),
        (["generate"], "Missing argument 'seed'"),
        (["experiments", "extra"], "unexpected extra argument"),
        (["no-such-command"], "No such command 'no-such-command'"),
        (["--bogus"], "specon: No such option: --bogus"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], needle: str):
    r = specon(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert needle in lines[0]
    assert r.stdout == ""


def test_an_old_policy_name_runs_as_its_new_one_with_one_warning_line(
        workload_file: Path, tmp_path: Path):
    """Issue 26: `specon+flowcon` is now `progress`, `specon` is `progress-equal-share`; the
    old names are accepted for one release, each with one line naming its new name."""
    r = specon("simulate", str(workload_file), "--seeds", "1", "--policies",
               "default,specon+flowcon,specon,progress", "--no-plots", "--json",
               "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    data = _strict_json(r.stdout)
    assert isinstance(data, dict)
    assert data["policies"] == ["default", "progress", "progress-equal-share"]
    warned = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: ")]
    assert warned == [
        "warning: policy 'specon+flowcon' is now called 'progress'; the old name is accepted "
        "until the next release (docs/upgrades.md)",
        "warning: policy 'specon' is now called 'progress-equal-share'; the old name is "
        "accepted until the next release (docs/upgrades.md)"], r.stderr
    assert "DeprecationWarning" not in r.stderr and "Traceback" not in r.stderr


def test_the_managers_view_runs_and_says_so_in_the_json(workload_file: Path, tmp_path: Path):
    r = specon("simulate", str(workload_file), "--seeds", "1", "--policies", "default,progress",
               "--no-plots", "--json", "--manager-view", "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    data = _strict_json(r.stdout)
    assert isinstance(data, dict) and data["policies"] == ["default", "progress"]
    assert (data["config"]["manager_view"], data["config"]["labelled_speeds"]) == (True, True)


def test_a_bad_file_for_validate_exits_2_naming_file_and_field(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("format: specon-workload/v1\ncluster: {workers: []}\nprofiles: {}\n"
                    "jobs: []\n")
    r = specon("validate", str(path))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert str(path) in lines[0] and "workers" in lines[0]
    path.write_text("format: [")
    r = specon("validate", str(path))
    # PyYAML's own message spans five lines, the source quoted: one line here
    assert r.returncode == 2 and r.stderr.splitlines() == [
        f"error: {path}: not valid YAML (line 1, column 10: expected the node content, but "
        "found '<stream end>')"], r.stderr
    binary = tmp_path / "model.json"
    binary.write_bytes(b"\x00\xff\xfe weights")  # a binary file given by mistake
    r = specon("validate", str(binary))
    assert r.returncode == 2 and r.stderr.splitlines() == [
        f"error: {binary}: not a text file (not UTF-8 at byte 1: a JSON or YAML workload is "
        "text)"], r.stderr


def test_a_failure_midway_exits_1_with_one_line(workload_file: Path, tmp_path: Path):
    out = tmp_path / "out"
    (out / "result.json").mkdir(parents=True)  # the result cannot be written there
    r = specon("simulate", str(workload_file), "--seeds", "1", "--policies", "default",
               "--no-plots", "--out", str(out))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines == [f"error: {out / 'result.json'}: Is a directory"]


def test_bare_specon_prints_the_help():
    r = specon()
    assert r.returncode == 2 and "Usage: specon" in r.stdout + r.stderr


def test_bad_workload_file_exits_2(workload_file: Path):
    data = json.loads(workload_file.read_text())
    data["jobs"][0]["submit_s"] = -3
    workload_file.write_text(json.dumps(data))
    r = specon("simulate", str(workload_file))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "submit_s" in lines[0] and "job 'j0'" in lines[0]


def test_sweep_reports_best(workload_file: Path, tmp_path: Path):
    r = specon("simulate", str(workload_file), "--seeds", "1", "--policies", "progress",
               "--sweep", "alpha=0.05,0.2 interval=20", "--out", str(tmp_path / "sw"))
    assert r.returncode == 0, r.stderr
    assert "best for progress" in r.stdout
    rows = json.loads((tmp_path / "sw" / "sweep.json").read_text())["rows"]
    assert len(rows) == 2


def test_validate_and_experiments(workload_file: Path):
    r = specon("validate", str(workload_file))
    assert r.returncode == 0 and "8 jobs" in r.stdout
    r = specon("experiments")
    assert r.returncode == 0 and "paper-30" in r.stdout


def test_generate_writes_a_valid_random_workload(tmp_path: Path):
    out = tmp_path / "random.json"
    r = specon("generate", "7", "--out", str(out), "--workers", "3-4", "--jobs", "5-6")
    assert r.returncode == 0, r.stderr
    assert specon("validate", str(out)).returncode == 0
    data = json.loads(out.read_text())
    assert 3 <= len(data["cluster"]["workers"]) <= 4 and 5 <= len(data["jobs"]) <= 6
    again = specon("generate", "7", "--workers", "3-4", "--jobs", "5-6")
    assert json.loads(again.stdout) == data  # one seed, one workload


@pytest.mark.parametrize(("args", "needle"), [
    (["--workers", "x"], "--workers: 'x' is not a range"),
    (["--workers", "5-2"], "--workers: needs 0 < low <= high"),
    (["--cpus", "2.5-4"], "--cpus: '2.5-4' is not a range of whole numbers"),
    (["--speed", "0-1"], "--speed: needs 0 < low <= high"),
    (["--load", "nan-1"], "--load"),
])
def test_generate_refuses_bad_ranges_in_one_line(args, needle):
    r = specon("generate", "1", *args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_version():
    r = specon("--version")
    assert r.returncode == 0 and r.stderr == ""
    assert re.fullmatch(r"specon \d+\.\d+\.\d+.*\n", r.stdout), r.stdout
    assert specon_package.__version__ in r.stdout


def test_version_when_not_installed(monkeypatch: pytest.MonkeyPatch):
    from importlib import metadata

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert cli.version() == f"{specon_package.__version__} (source tree, not installed)"


def _strict_json(text: str) -> object:
    def refuse(constant: str) -> object:
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_simulate_json_prints_the_comparison_alone(workload_file: Path, tmp_path: Path):
    out = tmp_path / "out"
    r = specon("simulate", str(workload_file), "--seeds", "2", "--policies",
               "default,progress,oracle", "--no-plots", "--json", "--out", str(out))
    assert r.returncode == 0, r.stderr
    data = _strict_json(r.stdout)  # stdout is the JSON and nothing else
    assert isinstance(data, dict)
    assert data["format"] == "specon-comparison/v1" and data["workload"] == "wl"
    assert data["seeds"] == [0, 1]
    assert data["policies"] == ["default", "progress", "oracle"]
    avg = data["aggregate"]["progress"]["avg_completion_s"]
    assert set(avg) == {"mean", "ci95", "n", "vs_default_pct", "headroom_pct"}
    assert avg["n"] == 2 and avg["mean"] > 0 and avg["ci95"] >= 0
    assert set(avg["vs_default_pct"]) == {"mean", "ci95", "n"}
    assert data["aggregate"]["default"]["avg_completion_s"]["vs_default_pct"]["mean"] == 0
    assert data["aggregate"]["oracle"]["makespan_s"]["mean"] is None  # a bound has none
    assert {(x["policy"], x["seed"]) for x in data["runs"]} == {
        (p, s) for p in data["policies"] for s in (0, 1)}
    assert data["files"] == [str(out / "result.json")]
    assert json.loads((out / "result.json").read_text())["aggregate"].keys() == \
        data["aggregate"].keys()
    assert "wrote 1 files" in r.stderr and "same workload for every seed" in r.stderr


def test_sweep_json(workload_file: Path, tmp_path: Path):
    r = specon("simulate", str(workload_file), "--seeds", "1", "--policies", "progress",
               "--sweep", "alpha=0.05,0.2", "--json", "--out", str(tmp_path / "sw"))
    assert r.returncode == 0, r.stderr
    data = _strict_json(r.stdout)
    assert isinstance(data, dict) and data["format"] == "specon-sweep/v1"
    assert [row["alpha"] for row in data["rows"]] == [0.05, 0.2]
    assert data["best"]["progress"] in data["rows"]


LINE = re.compile(r"\[simulate\] wl: seed [12]/2, policy [a-z+-]+(, [1-8]/8 jobs finished)? "
                  r"\(\d+/18 runs done, \d+ s\)")


def test_progress_lines_on_stderr_when_it_is_not_a_terminal(
        workload_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(progress, "EVERY_S", 0.02)  # 10 s in use
    r = CliRunner().invoke(cli.app, ["simulate", str(workload_file), "--seeds", "2",
                                     "--no-plots", "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    lines = r.stderr.splitlines()
    assert lines and all(LINE.fullmatch(ln) for ln in lines), lines
    assert "[simulate]" not in r.stdout and "avg completion" in r.stdout


def test_line_progress_reports_a_single_long_run_too(capsys: pytest.CaptureFixture[str]):
    import time

    with progress.LineProgress("simulate", every_s=0.02) as prog:
        task = prog.add_task("big", total=4)
        prog.update(task, status="seed 1/2, policy default")
        time.sleep(0.2)  # one run in progress, no tick
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 3
    assert all(re.fullmatch(r"\[simulate\] big: seed 1/2, policy default \(0/4 runs done, "
                            r"\d+ s\)", ln) for ln in lines), lines


def test_jobs_finished_are_reported_and_change_no_result(workload_file: Path):
    """The per-job hook of a long run: called once per job finished, in order, and the
    results are those of a run without it (the oracle, one linear programme, reports none)."""
    from specon.sim.model import SimConfig
    from specon.sim.runner import run_matrix
    from specon.workload.load import load_workload

    wl = load_workload(workload_file)
    seen: list[tuple[int, int]] = []
    pols = ["default", "progress", "oracle"]
    cfg = SimConfig(record_timeline=False)
    quiet = run_matrix("wl", lambda s: wl, pols, [0, 1], cfg)
    told = run_matrix("wl", lambda s: wl, pols, [0, 1], cfg,
                      job_done=lambda done, total: seen.append((done, total)))
    assert seen == [(i, 8) for i in range(1, 9)] * 4  # 2 policies x 2 seeds, 8 jobs each
    assert told.to_json(include_timelines=False) == quiet.to_json(include_timelines=False)
    prog = progress.LineProgress("simulate")
    prog.add_task("wl", total=6)
    prog.update(0, status="seed 1/2, policy default")  # type: ignore[arg-type]
    prog.jobs(3, 8)
    assert re.fullmatch(r"\[simulate\] wl: seed 1/2, policy default, 3/8 jobs finished "
                        r"\(0/6 runs done, \d+ s\)", prog.line())
    prog.update(0, status="seed 1/2, policy progress")  # type: ignore[arg-type]
    assert "jobs finished" not in prog.line()  # a new run is counted afresh
