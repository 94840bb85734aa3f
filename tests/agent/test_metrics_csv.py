"""A pod's metrics CSV file (``specon.io/metrics-csv``, Lightning's CSVLogger ``metrics.csv``):
the agent reads its rows through the same progress source as a log, on real files, written
the way Lightning 2.0 writes them (the whole file again at every flush), confined to the pod's
namespace folder like its other files."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pytest

from specon.csvmetrics import CsvMetricsParser
from specon_agent.actuators.cgroup import CgroupActuator
from specon_agent.agent import Agent
from specon_agent.cpu import CpuMeter
from specon_agent.discovery import Target, pod_targets
from specon_agent.followed import FollowedJob
from specon_agent.loop_config import LoopConfig
from specon_agent.progress import ProgressSource

FIXTURE = Path(__file__).parents[1] / "logparse/fixtures/pytorch-lightning-2.0.9-metrics.csv"
CID = "d" * 64


def rows() -> list[dict[str, str]]:
    with FIXTURE.open(newline="") as f:
        return list(csv.DictReader(f))


def rewrite(path: Path, upto: list[dict[str, str]], keys: list[str]) -> None:
    """What Lightning 2.0's CSVLogger does at each flush: open with "w" (same inode,
    truncated) and write the header and every row logged so far."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(upto)


def test_every_row_of_a_real_lightning_file_once_across_rewrites(tmp_path: Path) -> None:
    data = rows()
    assert len(data) == 30
    path = tmp_path / "metrics.csv"
    source = ProgressSource(path, "csv")
    assert source.poll().losses == []  # not there yet (the logger's first flush creates it)
    steps: list[int | None] = []
    losses: list[float] = []
    keys = ["train_loss", "epoch", "step"]
    for upto in (4, 8, 8, 20, 30):
        if upto == 20:
            # A new column appears: the whole file is rewritten with a longer header.
            keys = [*keys, "lr"]
            data = [{**r, "lr": "0.5"} for r in data]
        rewrite(path, data[:upto], keys)
        reading = source.poll()
        steps += reading.steps
        losses += reading.losses
    assert steps == list(range(1, 31))  # Lightning's 0-based "step" column, plus one
    assert losses == [float(r["train_loss"]) for r in rows()]


def test_rows_without_a_training_loss_and_bad_rows_are_skipped() -> None:
    parser = CsvMetricsParser()
    text = ("epoch,step,train_loss_step,train_loss_epoch,val_loss\n"
            "0,0,0.9,,\n"
            "0,1,,,0.7\n"         # a validation row
            "0,1,,0.85,\n"        # an epoch row
            "0,2,nan,,\n"
            "0,x,0.5,,\n"         # no step: malformed
            "0,3,0.4\n"           # too few columns: malformed
            "0,4,0.3,,\n")
    records = parser.feed(text[:37]) + parser.feed(text[37:]) + parser.flush()
    assert [r.step for r in records] == [1, 3, 5]
    assert records[0].loss == 0.9 and records[2].loss == 0.3
    assert parser.counters.malformed == 2 and parser.counters.non_finite == 1


def test_a_csv_without_a_step_column_counts_rows() -> None:
    parser = CsvMetricsParser()
    records = parser.feed("epoch,loss,accuracy\n0,0.7,0.5\n1,0.6,0.6\n")
    assert [(r.step, r.loss, dict(r.metrics)) for r in records] == [
        (1, 0.7, {"epoch": 0.0, "accuracy": 0.5}), (2, 0.6, {"epoch": 1.0, "accuracy": 0.6})]


def test_a_large_file_is_read_in_bounded_polls(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    count = 120_000
    with path.open("w") as f:
        f.write("train_loss,epoch,step\n")
        f.writelines(f"0.{k % 1000:03d}5,0,{k}\n" for k in range(count))
    assert path.stat().st_size > 1 << 20
    source = ProgressSource(path, "csv")
    source._tail.max_read = 256 << 10  # a smaller poll than the agent's, for a short test
    first = source.poll()
    assert 0 < len(first.steps) < count  # the rest waits for the next polls
    seen = list(first.steps)
    while len(seen) < count:
        more = source.poll().steps
        assert more
        seen += more
    assert seen == list(range(1, count + 1))


def pod(annotations: dict[str, str]) -> dict[str, object]:
    return {
        "metadata": {"namespace": "ns", "name": "train-a", "uid": "uid-a",
                     "labels": {"specon.io/training": "true"}, "annotations": annotations},
        "spec": {"containers": [{"name": "main"}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "main", "containerID": f"containerd://{CID}", "restartCount": 0,
             "state": {"running": {}}}]},
    }


def test_the_annotation_names_a_file_in_the_pods_namespace_folder(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    [target] = pod_targets(pod({"specon.io/metrics-csv": "runs/a/metrics.csv"}),
                           "specon.io/training", tmp_path / "logs", root)
    assert target.metrics_csv == root / "ns" / "runs" / "a" / "metrics.csv"
    assert target.file_refusals == ()
    for given in ("../other/metrics.csv", "/other/runs/metrics.csv"):
        [target] = pod_targets(pod({"specon.io/metrics-csv": given}), "specon.io/training",
                               tmp_path / "logs", root)
        assert target.metrics_csv is None
        assert [what for what, _ in target.file_refusals] == ["metrics-csv"]


def test_a_symlinked_metrics_csv_is_refused_and_counted(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    (root / "ns" / "runs").mkdir(parents=True)
    outside = tmp_path / "outside.csv"
    outside.write_text("loss\n0.25\n")
    link = root / "ns" / "runs" / "metrics.csv"
    os.symlink(outside, link)
    agent = Agent(LoopConfig(node="node-a"), CgroupActuator(node_cpus=2), CpuMeter())
    target = Target(cid=CID, namespace="ns", pod="train-a", uid="uid-a", metrics_csv=link,
                    file_root=root, log_path=tmp_path / "no.log", log_kind="cri")
    agent.jobs[CID] = FollowedJob(target, agent._source(target))
    agent.control.arrive(CID, 0.0, None)
    source = agent.jobs[CID].source
    assert source is not None and source.kind == "csv"
    for _ in range(2):
        agent._poll_one(CID)
    assert source.last_loss is None  # 0.25 never came back
    refused = agent.metrics.confinement_refusals.labels("metrics-csv")._value.get()
    assert refused == 1
    # The same file as a regular file in the folder is read.
    link.unlink()
    link.write_text("loss\n0.25\n")
    agent._poll_one(CID)
    assert source.last_loss == 0.25


def test_the_fixture_is_what_the_sdk_reported_in_the_same_run() -> None:
    """The fixture is script 4 of tests/logparse/fixtures/README.md (Lightning 2.0.9's
    CSVLogger); its first loss is the one the SDK's callback reported for step 1."""
    parser = CsvMetricsParser()
    records = parser.feed(io.StringIO(FIXTURE.read_text()).read())
    assert len(records) == 30 and records[0].loss == pytest.approx(0.7779229283332825)
