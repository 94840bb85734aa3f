"""Progress records: one JSON line to the file and to stdout, strict JSON, steps counted."""

from __future__ import annotations

import io
import json
import math

from specon.sdk.progress import ENV_PROGRESS_FILE, Reporter


def lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_report_writes_the_same_line_to_the_file_and_stdout(tmp_path):
    out = io.StringIO()
    reporter = Reporter(tmp_path / "sub" / "progress.jsonl", stdout=out)
    reporter.report(0.5, step=10, accuracy=0.25)
    reporter.report(0.25)
    reporter.close()
    written = (tmp_path / "sub" / "progress.jsonl").read_text()
    assert written == out.getvalue()
    first, second = lines(written)
    assert first["specon"] == 1 and first["event"] == "progress"
    assert (first["step"], first["loss"], first["metrics"]) == (10, 0.5, {"accuracy": 0.25})
    assert second["step"] == 11 and "metrics" not in second
    assert first["time"] <= second["time"]


def test_non_finite_values_are_strings_so_the_line_stays_strict_json():
    out = io.StringIO()
    reporter = Reporter(stdout=out)
    reporter.report(math.nan, step=1, grad=math.inf)
    reporter.report(-math.inf, step=2)
    first, second = out.getvalue().splitlines()
    assert "NaN" not in first and "Infinity" not in first
    assert json.loads(first)["loss"] == "nan"
    assert json.loads(first)["metrics"]["grad"] == "inf"
    assert json.loads(second)["loss"] == "-inf"


def test_the_file_comes_from_the_environment(tmp_path, monkeypatch):
    target = tmp_path / "p.jsonl"
    monkeypatch.setenv(ENV_PROGRESS_FILE, str(target))
    reporter = Reporter(stdout=io.StringIO())
    reporter.report(1.0, step=3)
    reporter.close()
    assert lines(target.read_text())[0]["step"] == 3


def test_appends_across_reporters(tmp_path):
    path = tmp_path / "p.jsonl"
    for step in (1, 2):
        r = Reporter(path, stdout=io.StringIO())
        r.report(float(step), step=step)
        r.close()
    assert [rec["step"] for rec in lines(path.read_text())] == [1, 2]
