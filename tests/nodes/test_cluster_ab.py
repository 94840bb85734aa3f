"""The short form of benchmarks/cluster_ab.py on the session's two real nodes: two short jobs,
one repeat of both arms (no SpeCon; SpeCon installed with Helm), no calibration run. It checks
only that both arms finish and that the record is written; the figures are the benchmark's."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from nodelib import RealCluster
from planelib import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import cluster_ab
from cluster_ab_report import METRICS

pytestmark = [pytest.mark.nodes, pytest.mark.plane, pytest.mark.slow]


def test_short_form_both_arms_finish_and_the_record_is_written(
        cluster: RealCluster, node_images: dict[str, str], tmp_path: Path) -> None:
    caps = {n: float(os.cpu_count() or 1) for n in cluster.node_names}  # uncapped here
    # the two lightest examples, a few seconds of work each: the pods' start is most of it
    jobs = [cluster_ab.Job("j1-mlp", "mlp", "mlp-digits", 200, 0.0),
            cluster_ab.Job("j2-vae", "vae", "vae-digits", 200, 0.0)]
    cluster_ab.benchmark(cluster, node_images, jobs, repeats=1, caps=caps, out_dir=tmp_path,
                         arm_timeout_s=600)

    record = json.loads((tmp_path / "cluster-ab.json").read_text())
    assert record["format"] == "specon-cluster-ab/v1"
    assert {"spec", "runs", "summaries", "aggregate", "prediction"} <= set(record)
    assert sorted(r["arm"] for r in record["runs"]) == ["none", "specon"]
    for summary in record["summaries"]:
        assert summary["finished"], summary
        assert [j["status"] for j in summary["jobs"]] == ["succeeded"] * 2, summary
        assert {"completion_s", "time_to_90_s", "moves", "nodes"} <= set(summary["jobs"][0])
    for arm in ("none", "specon"):
        assert set(record["aggregate"][arm]) == set(METRICS)
    assert "| avg_completion_s |" in (tmp_path / "cluster-ab.md").read_text()
