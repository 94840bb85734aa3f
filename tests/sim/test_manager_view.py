"""The simulator with the manager's view (SimConfig.manager_view, benchmarks/suite.py
--manager-view): placement and moves see each node as the manager does
(specon_manager.state.node_loads), with its per-core speed only where its specon.io/cpu-speed
label gives it, every job linear up to the cores it keeps busy, and a new job as the typical
one (the median work left and cores used) of its kind where the nodes are labelled and jobs of
its kind (its profile, as a pod's image) run, else of the least loaded nodes: not its own work
and speed-up table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specon.core.progress import CANDIDATES, least_loaded
from specon.sim.engine import PLACEMENTS, inputs
from specon.sim.generate import family_workload
from specon.sim.model import SimConfig
from specon.sim.runner import run_one

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("labelled", [True, False])
def test_placement_sees_the_nodes_as_the_manager_does(labelled: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    wl = family_workload("heterogeneous", 9)
    speeds = {w.speed for w in wl.cluster.workers}
    assert len(speeds) > 1  # a cluster whose per-core speeds differ
    original, seen = PLACEMENTS["progress"], []
    kinds: list[bool] = []  # whether a job of the new one's kind ran somewhere

    def place(sim, job, fits):  # type: ignore[no-untyped-def]
        nodes = [inputs.reserved_node(sim, w) for w in fits]
        for w, n in zip(fits, nodes, strict=True):
            assert n.speed == (w.speed if labelled else 1.0)
            scale = 1.0 if labelled else 1.0 / w.speed  # CPU-seconds of the node, unlabelled
            for jl in n.jobs:
                j = sim.jobs[jl.name]
                assert jl.work == pytest.approx(inputs.work_left(j) * scale)
                assert jl.cap == inputs.demand_on(j, w)
                assert jl.curve.at(jl.cap) == pytest.approx(jl.cap)  # linear: no table
        new = inputs.manager_placement_load(sim, nodes, job)
        same = [j for n in nodes for j in n.jobs if j.work > 0
                and sim.jobs[j.name].spec.profile == job.spec.profile]
        kinds.append(bool(same))
        busy = same if same and labelled else [
            j for n in least_loaded(nodes, CANDIDATES) for j in n.jobs if j.work > 0]
        works, caps = sorted(j.work for j in busy), sorted(j.cap for j in busy)
        assert (new.name, new.work) == ("new", works[len(works) // 2] if works else 0.0)
        most = max(w.cpus for w in fits)
        assert new.cap == (caps[len(caps) // 2] if caps and labelled else most)
        seen.append(job.spec.name)
        return original(sim, job, fits)

    monkeypatch.setitem(PLACEMENTS, "progress", place)
    cfg = SimConfig(record_timeline=False, manager_view=True, labelled_speeds=labelled)
    res = run_one(wl, "progress", cfg, 0)
    assert len(seen) >= len(wl.jobs) and all(j.finish_s is not None for j in res.jobs)
    assert any(kinds) and not all(kinds)  # both forms were exercised


def test_without_labels_the_manager_packs_slow_nodes_as_if_they_were_fast() -> None:
    """On the widened suite's heterogeneous draw 9 (15 jobs, 7 workers of speeds 0.47-3.65),
    the policy that knows the speeds (the labels) beats the one that takes every node at
    speed 1, which still beats default."""
    wl = family_workload("heterogeneous", 9)
    avg = {}
    for name, cfg in (("default", {}), ("unlabelled", {"manager_view": True,
                                                       "labelled_speeds": False}),
                      ("labelled", {"manager_view": True})):
        policy = "default" if name == "default" else "progress"
        avg[name] = run_one(wl, policy, SimConfig(record_timeline=False, **cfg),
                            0).summary()["avg_completion_s"]
    assert avg["labelled"] < avg["unlabelled"] < avg["default"], avg


def test_the_suite_refuses_unlabelled_without_the_managers_view() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/suite.py"), "--unlabelled",
                          "--workloads", "1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--unlabelled needs --manager-view" in out.stderr
    assert "Traceback" not in out.stderr
