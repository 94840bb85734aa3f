"""The profile recorder against real jobs: a plain-Python job honouring the contract, and
(with torch) the shipped example profiles, whose loss curves it must reproduce exactly."""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specon.recorder import (
    RecordError,
    app,
    default_cores,
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
