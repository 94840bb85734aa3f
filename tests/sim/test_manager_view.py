"""The simulator with the manager's view (SimConfig.manager_view, benchmarks/suite.py
--manager-view): placement and moves see each node as the manager does
(specon_manager.state.node_loads), with its per-core speed where its specon.io/cpu-speed label
gives it, else as its agent measured it (off by up to SimConfig.speed_error), every job linear
up to the cores it keeps busy, and a new job as the typical one (the median work left and
cores used) of its kind where the nodes' speeds are known and jobs of its kind (its profile,
as a pod's image) run, else of the least loaded nodes: not its own work and speed-up table."""

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


#: How the manager knows each node's speed: its label, its agent's probe, or not at all.
SPEEDS = {"labelled": {}, "measured": {"labelled_speeds": False},
          "unmeasured": {"labelled_speeds": False, "measured_speeds": False}}


@pytest.mark.parametrize("speeds", list(SPEEDS))
def test_placement_sees_the_nodes_as_the_manager_does(speeds: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    labelled = speeds != "unmeasured"  # the speed known: the kind's typical job is used
    wl = family_workload("heterogeneous", 9)
    assert len({w.speed for w in wl.cluster.workers}) > 1  # a cluster whose per-core speeds differ
    original, seen = PLACEMENTS["progress"], []
    kinds: list[bool] = []  # whether a job of the new one's kind ran somewhere

    def place(sim, job, fits):  # type: ignore[no-untyped-def]
        nodes = [inputs.reserved_node(sim, w) for w in fits]
        for w, n in zip(fits, nodes, strict=True):
            if speeds == "measured":  # the probe's: off by at most speed_error, the same one
                assert n.speed == w.seen_speed != w.speed
                assert n.speed == pytest.approx(w.speed, rel=SimConfig().speed_error)
            else:
                assert n.speed == (w.speed if labelled else 1.0)
            # an agent's CPU-seconds of its node, times the speed the manager takes it at
            scale = n.speed / w.speed
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
    cfg = SimConfig(record_timeline=False, manager_view=True, **SPEEDS[speeds])
    res = run_one(wl, "progress", cfg, 0)
    assert len(seen) >= len(wl.jobs) and all(j.finish_s is not None for j in res.jobs)
    assert any(kinds) and not all(kinds)  # both forms were exercised


def test_without_speeds_the_manager_packs_slow_nodes_as_if_they_were_fast() -> None:
    """On the widened suite's heterogeneous draw 9 (15 jobs, 7 workers of speeds 0.47-3.65),
    the policy that knows the speeds (the labels, or the agents' probes) beats the one that
    takes every node at speed 1, which still beats default."""
    wl = family_workload("heterogeneous", 9)
    avg = {"default": run_one(wl, "default", SimConfig(record_timeline=False),
                              0).summary()["avg_completion_s"]}
    for name, cfg in SPEEDS.items():
        avg[name] = run_one(wl, "progress", SimConfig(record_timeline=False, manager_view=True,
                                                      **cfg), 0).summary()["avg_completion_s"]
    assert max(avg["labelled"], avg["measured"]) < avg["unmeasured"] < avg["default"], avg


def test_the_suite_refuses_unlabelled_without_the_managers_view() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/suite.py"), "--unlabelled",
                          "--workloads", "1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--unlabelled needs --manager-view" in out.stderr
    assert "Traceback" not in out.stderr
