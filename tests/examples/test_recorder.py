"""The profile recorder against real jobs: a plain-Python job honouring the contract, and
(with torch) the shipped example profiles, whose loss curves it must reproduce exactly."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specon.recorder import (
    RecordError,
    app,
    default_cores,
    default_name,
    even_sample,
    record_profile,
    reference_run,
)
from specon.workload.models import Profile

ROOT = Path(__file__).resolve().parents[2]
TOY = [sys.executable, str(Path(__file__).with_name("toyjob.py"))]
PROFILES = ROOT / "specon" / "data" / "profiles"


@pytest.fixture(autouse=True)
def _importable(monkeypatch):
    # the recorded job is a separate process: it finds the SDK through PYTHONPATH
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH", "")])))


def test_even_sample_keeps_ends_and_spacing():
    values = list(range(1000))
    picked = even_sample(values, 400)
    assert len(picked) == 400 and picked[0] == 0 and picked[-1] == 999
    gaps = {b - a for a, b in itertools.pairwise(picked)}
    assert gaps <= {2, 3}
    assert even_sample(values[:10], 400) == values[:10]


def test_default_cores():
    assert default_cores(1) == [1]
    assert default_cores(2) == [1, 2]
    assert default_cores(6) == [1, 2, 4, 6]
    assert default_cores(16) == [1, 2, 4, 8, 16]


def test_records_a_valid_profile_of_a_contract_job_and_reproduces_its_loss(tmp_path):
    command = [*TOY, "150"]
    first = record_profile(command, "toy", cores=[1, 2], repeats=1, window=0.3,
                           workdir=tmp_path / "a", echo=lambda _: None)
    profile = Profile.model_validate(first)
    assert list(first) == ["name", "iterations", "loss", "cpu_seconds_per_iteration",
                           "speedup", "checkpoint_seconds", "restore_seconds",
                           "checkpoint_bytes", "memory_mb"]
    assert profile.iterations == 150 and len(profile.loss) == 150
    assert profile.loss[0] > profile.loss[-1]
    assert profile.speedup["1"] == 1.0
    assert profile.checkpoint_bytes > 0 and profile.checkpoint_seconds > 0
    assert profile.restore_seconds > 0
    # the job sleeps 2 ms a step: the measured pace cannot be below that
    assert profile.cpu_seconds_per_iteration >= 0.002
    second = record_profile(command, "toy", cores=[1], repeats=1, window=0.3,
                            workdir=tmp_path / "b", echo=lambda _: None)
    assert second["loss"] == first["loss"]


def test_a_job_without_checkpoints_gets_no_checkpoint_figures(tmp_path):
    said: list[str] = []
    profile = record_profile([*TOY, "120", "--no-checkpoint"], "toy", cores=[1], repeats=1,
                             window=0.2, workdir=tmp_path, echo=said.append)
    assert "checkpoint_seconds" not in profile and "restore_seconds" not in profile
    assert any("cannot be migrated" in line for line in said)


def test_a_job_that_reports_nothing_is_refused_with_the_reason(tmp_path):
    with pytest.raises(RecordError, match="no progress records"):
        record_profile([sys.executable, "-c", "print('loss=1.0')"], "x", cores=[1],
                       workdir=tmp_path)
    with pytest.raises(RecordError, match="cannot start"):
        record_profile([str(tmp_path / "no-such-program")], "x", cores=[1], workdir=tmp_path)
    with pytest.raises(RecordError, match="exited with 3"):
        record_profile([sys.executable, "-c", "raise SystemExit(3)"], "x", cores=[1],
                       workdir=tmp_path)


def test_cli_writes_the_profile_file(tmp_path):
    out = tmp_path / "toy.json"
    result = CliRunner().invoke(app, ["record", "--name", "toy", "-o", str(out), "--cores", "1",
                                      "--repeats", "1", "--window", "0.3", "--", *TOY, "150"])
    assert result.exit_code == 0, result.output
    Profile.model_validate(json.loads(out.read_text()))
    bad = CliRunner().invoke(app, ["record", "--name", "x", "--cores", "1", "--",
                                   sys.executable, "-c", "pass"])
    assert bad.exit_code == 1 and "no progress records" in bad.output


def specon(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The `specon` command as installed, through its entry point (exit codes included)."""
    return subprocess.run([sys.executable, "-m", "specon", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize(("command", "name"), [
    (["python3", "-m", "specon_examples.vae", "--iterations", "2000"], "vae"),
    (["/usr/bin/python3", "-u", "-m", "pkg.sub.Train_Model"], "train_model"),
    (["python3", "-mpkg.job"], "job"),
    (["python3", "-m", "pkg.__main__"], "pkg"),
    (["python3", "scripts/my train.py", "--lr", "0.1"], "my-train"),
    (["./Train.SH"], "train"),
    (["torchrun", "--nproc-per-node", "1", "fit.py"], "fit"),
    (["python3", "-c", "pass"], "python3"),
    (["./+++"], "profile"),
])
def test_default_name_from_the_command(command, name):
    assert default_name(command) == name


def test_record_without_name_takes_it_from_the_command(tmp_path):
    r = specon("profile", "record", "--cores", "1", "--repeats", "1", "--window", "0.3", "--",
               *TOY, "150", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "profile name: toyjob (from the command" in r.stderr
    profile = json.loads((tmp_path / "toyjob.json").read_text())
    assert profile["name"] == "toyjob" and profile["iterations"] == 150


@pytest.mark.parametrize(("job", "needle"), [
    ("import sys; print('no luck', file=sys.stderr); sys.exit(3)",
     "error: the job exited with 3; the end of its output:\nno luck"),
    ("print('loss=1.0')", "error: the job reported no progress records"),  # prints, no SDK
    ("pass", "error: the job reported no progress records"),
    ("from specon.sdk import report\nfor i in range(1, 4): report(float('nan'), step=i)",
     "error: the job's 3 progress record(s) carry no finite loss"),
])
def test_a_failing_job_exits_1(tmp_path, job, needle):
    r = specon("profile", "record", "--cores", "1", "--", sys.executable, "-c", job,
               cwd=tmp_path)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize(("args", "needle"), [
    (["--bogus", "--", "true"], "specon profile record: No such option: --bogus"),
    ([], "Invalid value for 'command': give the job's command after --"),
    (["--name", "x"], "give the job's command after --"),
    (["--", "no-such-program-here", "x.py"], "'no-such-program-here' is not an executable"),
    (["--cores", "a", "--", "true"], "Invalid value for '--cores': 'a' is not"),
    (["--cores", "2", "--", "true"], "'--cores': must include 1"),
    (["--cores", "1,4096", "--", "true"], "'--cores': each count must be between 1 and"),
    (["--repeats", "0", "--", "true"], "'--repeats': must be at least 1"),
    (["--window", "-1", "--", "true"], "'--window': must be a positive number"),
    (["--timeout", "nan", "--", "true"], "'--timeout': must be a positive number"),
    (["--max-points", "1", "--", "true"], "'--max-points': must be at least 2"),
    (["--repeats", "x", "--", "true"], "Invalid value for '--repeats'"),
    (["-o", "/proc/no-such-dir/p.json", "--", "true"], "'--output': cannot create"),
])
def test_bad_input_exits_2_in_one_line_before_running_anything(tmp_path, args, needle):
    r = specon("profile", "record", *args, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert needle in lines[0] and "reference run" not in r.stderr


@pytest.mark.torch
@pytest.mark.slow
def test_shipped_profile_loss_curve_is_reproduced(tmp_path):
    """The recorder, run again on the example, gives the shipped profile's loss curve: the
    same 200 points, each within float noise. Bit for bit it holds only on the CPU kernels the
    profile was recorded with: on an AVX2 AMD EPYC host (no AVX-512) the largest relative
    difference was 1.3e-5, and forcing other kernels here (ATEN_CPU_CAPABILITY=default,
    OPENBLAS_CORETYPE=Sandybridge) gave 9.6e-4 and 5.5e-4; the same job with --seed 1 differs
    by 0.30, so the tolerance still tells another run from this one."""
    from specon_examples import launch

    python = launch.torch_python()
    if python is None:
        pytest.skip("no interpreter here imports torch (hack/test.d/30-torch.sh installs one)")
    shipped = json.loads((PROFILES / "mlp-digits.json").read_text())
    ref = reference_run(launch.command(python, "mlp"), cpu=0, workdir=tmp_path)
    assert ref.iterations == shipped["iterations"]
    got = even_sample(ref.losses, 400)
    assert len(got) == len(shipped["loss"])
    assert got == pytest.approx(shipped["loss"], rel=2e-3, abs=0.0)
