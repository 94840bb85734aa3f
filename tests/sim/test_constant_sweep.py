"""The trade-off sweep (benchmarks/constant_sweep.py): one constant of the progress policy set
to each value in turn, the suite's figures per value. At the shipped value it must measure
what the suite does, and the constant must be the shipped one again after."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import specon.core.progress as progress
from specon.sim.noise import NOISE

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sweep = _load("constant_sweep")
suite = _load("suite")
NOISY = dict(NOISE["standard"])


def test_at_the_shipped_value_the_sweep_measures_what_the_suite_does() -> None:
    shipped = progress.EARLY_FACTOR
    rows = sweep.one_workload(("overload", 18, [0, 1], NOISY, "EARLY_FACTOR", [1.0, shipped]))
    assert shipped == progress.EARLY_FACTOR  # put back
    assert [r["value"] for r in rows] == [1.0, shipped]
    ref = suite.one_workload(("overload", 18, ["default", "progress"], [0, 1], NOISY))
    assert rows[1]["policies"]["progress"] == ref["policies"]["progress"]
    for row in rows:  # default's means, run once (the suite adds its slow-downs, all 1)
        assert row["policies"]["default"] == {
            k: v for k, v in ref["policies"]["default"].items() if k != "slowdowns"}
    # on this overloaded cluster with noisy logs the early key's factor moves time to 90%
    assert (rows[0]["policies"]["progress"]["avg_time_to_90_s"]
            != ref["policies"]["progress"]["avg_time_to_90_s"])


def test_the_constant_is_put_back_when_a_run_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    shipped, real = progress.FAIR_LAG, sweep.run_one

    def failing(wl, policy, cfg, seed):  # type: ignore[no-untyped-def]
        if policy == "progress":  # an injected fault, with the constant set
            assert progress.FAIR_LAG == 1.1
            raise RuntimeError("injected")
        return real(wl, policy, cfg, seed)

    monkeypatch.setattr(sweep, "run_one", failing)
    with pytest.raises(RuntimeError, match="injected"):
        sweep.one_workload(("standard", 0, [0], {}, "FAIR_LAG", [1.1]))
    assert shipped == progress.FAIR_LAG


def test_a_constant_it_cannot_set_is_one_clear_error() -> None:
    for args in (["CANDIDATES", "8"], ["EARLY_FACTOR", "1,x"], ["FASTEST", "2.5"]):
        out = subprocess.run([sys.executable, str(ROOT / "benchmarks/constant_sweep.py"), *args],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, out
        assert "Traceback" not in out.stderr
        assert out.stderr.strip().splitlines()[-1].startswith("constant_sweep.py: error:")
