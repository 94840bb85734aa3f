"""``specon whatif``'s conversion of the manager's live jobs into a workload of the work left:
totals declared or estimated, step cost, cores, fitted or assumed loss, the jobs left out, and
replies that name the bad field."""

from __future__ import annotations

import math
from typing import Any

import pytest

from specon.core.predict import fit_curve
from specon.whatif import LOSS_POINTS, BadReply, notes, parse, to_workload


def _job(pod: str, node: str = "n1", **extra: Any) -> dict[str, Any]:
    return {"namespace": "ml", "pod": pod, "node": node, "fresh": True, "reported": 1000.0,
            **extra}


def _reply(*jobs: dict[str, Any]) -> dict[str, Any]:
    return {"format": "specon-whatif-input/v1", "time": 1001.0,
            "nodes": [{"name": "n1", "cpus": 8, "fresh": True},
                      {"name": "n2", "cpus": 4, "fresh": True},
                      {"name": "gone", "cpus": 2, "fresh": False}],
            "jobs": list(jobs)}


def test_the_work_left_of_each_measured_job_becomes_a_profile_submitted_now() -> None:
    curve = [[s, 2.0 * math.exp(-s / 300) + 0.1] for s in range(20, 420, 20)]
    reply = _reply(
        _job("declared", step=400, total_steps=1000, work_done_s=200.0, work_s=300.0,
             demand_cores=3.0, loss=curve[-1][1], losses=curve, checkpointable=True,
             target_loss=0.2, deadline=1600.0),
        _job("undeclared", node="n2", step=50, work_done_s=100.0, work_s=100.0, loss=1.5),
        _job("new", step=None, loss=None),  # no step measured yet
        _job("done", step=10, total_steps=10, work_done_s=5.0, loss=0.1),
    )
    wl, counts = to_workload(parse(reply))
    assert [j.name for j in wl.jobs] == ["ml/declared", "ml/undeclared"]
    assert {j.submit_s for j in wl.jobs} == {0.0}
    # the stale node without jobs is no worker; the fresh ones are
    assert [(w.name, w.cpus) for w in wl.cluster.workers] == [("n1", 8), ("n2", 4)]
    declared, undeclared = wl.profiles["ml/declared"], wl.profiles["ml/undeclared"]
    assert declared.iterations == 600  # 1000 declared - 400 done
    assert declared.cpu_seconds_per_iteration == pytest.approx(0.5)
    assert declared.max_cores == 3.0  # the cores it showed it can use
    assert undeclared.iterations == 50  # as many again as done
    assert undeclared.cpu_seconds_per_iteration == pytest.approx(2.0)
    assert undeclared.max_cores == 4.0  # its node's CPUs
    assert len(declared.loss) == LOSS_POINTS
    # fitted (the predictor's curve): the loss seen at the last step, the fit's at the total
    fit = fit_curve([s for s, _ in curve], [v for _, v in curve])
    assert fit is not None
    assert declared.loss[0] == pytest.approx(curve[-1][1], rel=0.05)
    assert declared.loss[-1] == pytest.approx(fit.loss_at(1000))
    assert declared.loss[-1] < declared.loss[0] / 3
    # assumed: falls from its current loss as step^-0.5, to 1/sqrt(2) of it at twice the steps
    assert undeclared.loss[0] == pytest.approx(1.5)
    assert undeclared.loss[-1] == pytest.approx(1.5 / math.sqrt(2))
    first = wl.jobs[0]
    assert first.migratable and first.target_loss == 0.2 and first.deadline_s == 600.0
    assert not wl.jobs[1].migratable and wl.jobs[1].deadline_s is None
    assert counts == {"declared": 2, "estimated": 1, "fitted": 1, "assumed": 1,
                      "unmeasured": 1, "finished": 1}
    said = "\n".join(notes(counts))
    assert "1 job(s) declare no total steps" in said and "as many steps again" in said
    assert "1 job(s) without a measured step yet: left out" in said


@pytest.mark.parametrize(("change", "field"), [
    ({"time": -1}, "time"),
    ({"nodes": [{"name": "n1", "cpus": 0}]}, "nodes.0.cpus"),
    ({"jobs": [_job("a", step=-3)]}, "jobs.0.step"),
    ({"jobs": [_job("a", step=3, work_done_s=float("nan"))]}, "jobs.0.work_done_s"),
    ({"jobs": [_job("a", step=3, losses=[[1, "x"]])]}, "jobs.0.losses.0.1"),
    ({"jobs": "all"}, "jobs"),
    ({"format": "specon-whatif-input/v9"}, "format"),
    ({"move_cost_s": -1}, "move_cost_s"),
    ({"move_cost_s": "inf"}, "move_cost_s"),
    ({"nodes": [{"name": "n1", "cpus": 4, "speed": 100}]}, "nodes.0.speed"),
])
def test_a_malformed_reply_names_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(BadReply, match=f"^{field.replace('.', '[.]')}: "):
        parse({**_reply(), **change})


def test_a_cluster_with_nothing_measured_says_so() -> None:
    with pytest.raises(BadReply, match=r"no job with a measured step cost.*1 reported, 1 not "
                       r"yet measured"):
        to_workload(parse(_reply(_job("new"))))


def test_a_job_an_older_manager_sent_twice_is_simulated_once_from_its_later_report() -> None:
    # Both nodes of a move in flight report it; the source's report is older (and first).
    source = _job("moved", node="gone", fresh=False, step=100, total_steps=1000,
                  work_done_s=100.0, loss=1.0, reported=900.0)
    target = _job("moved", node="n2", step=90, total_steps=1000, work_done_s=180.0, loss=1.1,
                  reported=1000.0)
    for jobs in ((source, target), (target, source)):
        wl, counts = to_workload(parse(_reply(*jobs, _job("other", step=10, work_done_s=5.0))))
        assert [j.name for j in wl.jobs] == ["ml/moved", "ml/other"]
        moved = wl.profiles["ml/moved"]
        assert moved.iterations == 910 and moved.cpu_seconds_per_iteration == pytest.approx(2.0)
        assert counts["declared"] == 1 and counts["estimated"] == 1
        # the stale source, left with no job, is no worker
        assert [w.name for w in wl.cluster.workers] == ["n1", "n2"]
    # The same instant: the fresh node's report, else the node first by name.
    twin = {**source, "reported": 1000.0}
    wl, _ = to_workload(parse(_reply(twin, target)))
    assert wl.profiles["ml/moved"].iterations == 910
    wl, _ = to_workload(parse(_reply({**target, "node": "n2", "step": 80},
                                     {**target, "node": "n1", "step": 70})))
    assert wl.profiles["ml/moved"].iterations == 930


@pytest.mark.parametrize(("cost", "each"), [(None, 1.0), (120.0, 58.5), (2.0, 0.0)])
def test_a_move_stops_a_job_as_long_as_the_manager_charges_it(
        cost: float | None, each: float) -> None:
    """The manager's planner charges a move ``migration_cost_s`` (120 s as shipped) until the
    job's own is measured; whatif's moves stop a job that long (checkpoint + restore + the
    simulator's 3 s restart), not 1 s each as before (a manager older than the field)."""
    reply = _reply(_job("a", step=100, work_done_s=50.0, total_steps=400))
    if cost is not None:
        reply["move_cost_s"] = cost
    inp = parse(reply)
    wl, counts = to_workload(inp)
    prof = wl.profiles["ml/a"]
    assert (prof.checkpoint_seconds, prof.restore_seconds) == (each, each)
    said = "\n".join(notes(counts, inp))
    assert f"checkpoint and restore {each:g} s each" in said
    assert ("as the manager charges it" in said) == (cost is not None)


def test_a_labelled_nodes_speed_is_its_workers_and_scales_its_jobs_step_cost() -> None:
    """A node labelled specon.io/cpu-speed=2 does a step in half the CPU-seconds of a speed-1
    core: its jobs' measured cost is scaled up to speed-1 seconds, and its worker runs at 2."""
    reply = _reply(_job("fast", step=100, total_steps=200, work_done_s=50.0),
                   _job("plain", node="n2", step=100, total_steps=200, work_done_s=50.0))
    reply["nodes"][0]["speed"] = 2.0
    wl, _ = to_workload(parse(reply))
    assert [(w.name, w.speed) for w in wl.cluster.workers] == [("n1", 2.0), ("n2", 1.0)]
    assert wl.profiles["ml/fast"].cpu_seconds_per_iteration == pytest.approx(1.0)
    assert wl.profiles["ml/plain"].cpu_seconds_per_iteration == pytest.approx(0.5)
