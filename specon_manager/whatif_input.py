"""``GET /status/whatif-input``: what ``specon whatif`` needs to simulate the live cluster (each
job's progress, step cost, cores and recent losses; each node's CPUs), served beside the status
page under ``expose_status``. :class:`LossHistory` keeps each job's last few (step, loss) points
from its heartbeats; bounded in points per job and in jobs."""

from __future__ import annotations

import operator
import threading
import time
from collections import OrderedDict, deque
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from specon.wire import WHATIF_INPUT_FORMAT, Heartbeat, latest_reports
from specon_manager.job_keys import pod_key
from specon_manager.state import ClusterState

router = APIRouter()

#: Points kept per job: enough for specon.core.predict.fit_curve (5 at least), little memory.
POINTS_PER_JOB = 32
#: Jobs kept; beyond it the one reported least recently is forgotten.
MAX_JOBS = 20_000
FORMAT = WHATIF_INPUT_FORMAT


class LossHistory:
    """Each job's recent (step, loss) points, one per heartbeat whose step moved on. Keyed by
    namespace/pod and pod UID: a new pod of that name starts a new history."""

    def __init__(self, points: int = POINTS_PER_JOB, jobs: int = MAX_JOBS) -> None:
        self._points = points
        self._max_jobs = jobs
        self._by: OrderedDict[str, tuple[str, deque[tuple[int, float]]]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, hb: Heartbeat) -> None:
        with self._lock:
            for j in hb.jobs:
                if j.step is None or j.loss is None:
                    continue
                key = pod_key(j.namespace, j.pod)
                kept = self._by.get(key)
                if kept is None or kept[0] != j.uid:
                    kept = (j.uid, deque(maxlen=self._points))
                    self._by[key] = kept
                self._by.move_to_end(key)
                points = kept[1]
                if not points or j.step > points[-1][0]:
                    points.append((j.step, j.loss))
                elif j.step < points[-1][0]:  # restarted from a checkpoint: the curve again
                    points.clear()
                    points.append((j.step, j.loss))
            while len(self._by) > self._max_jobs:
                self._by.popitem(last=False)

    def points(self, namespace: str, pod: str, uid: str) -> list[tuple[int, float]]:
        with self._lock:
            kept = self._by.get(pod_key(namespace, pod))
            return list(kept[1]) if kept is not None and kept[0] == uid else []


def whatif_input(state: ClusterState, losses: LossHistory | None,
                 now: float | None = None, move_cost_s: float | None = None) -> dict[str, Any]:
    """Nodes (name, CPUs, load, fresh) and every reported job as of its node's last heartbeat
    (``reported``: agent clock); ``time`` is the manager's now. Steps, step cost and totals are
    the agent's: ``work_done_s`` CPU-seconds for ``step`` steps, ``work_s`` left.
    ``move_cost_s``: what the planner charges a move until the job's own is measured (the
    manager's ``migration_cost_s``), so that whatif stops a moved job as long.

    One entry per namespace/pod (specon.wire.latest_reports): during a move the source's last
    heartbeat and the target's can both report the job (same UID or its replacement's). A job
    whose pod is being deleted (``ending``) is left out, unless a migration moves it: it will
    not run to its end."""
    nodes, jobs = [], []
    moving = {r.pod for r in state.reservations()}  # a moved job's source ends, the job goes on
    for node in state.nodes():
        hb = state.heartbeat(node)
        if hb is None:
            continue
        fresh = state.is_fresh(node)
        nodes.append({"name": node, "cpus": hb.capacity_cpus, "load_cores": hb.load_cores,
                      "fresh": fresh, "reported": hb.time, "speed": state.known_speed(node)})
        for j in hb.jobs:
            if j.ending and pod_key(j.namespace, j.pod) not in moving:
                continue  # its pod is being deleted: no job to simulate to its end
            jobs.append({
                "namespace": j.namespace, "pod": j.pod, "uid": j.uid, "node": node,
                "fresh": fresh, "category": j.category.value, "step": j.step,
                "total_steps": j.total_steps, "work_s": j.work_s, "work_done_s": j.work_done_s,
                "cpu_cores": j.cpu_cores, "limit_cores": j.limit * hb.capacity_cpus,
                "demand_cores": j.demand_cores, "loss": j.loss, "growth": j.growth,
                "checkpointable": j.checkpointable, "target_loss": j.target_loss,
                "deadline": j.deadline, "created": j.created, "reported": hb.time,
                "losses": ([] if losses is None else
                           [list(p) for p in losses.points(j.namespace, j.pod, j.uid)]),
            })
    jobs = latest_reports(jobs, operator.getitem)
    jobs.sort(key=lambda j: (j["namespace"], j["pod"]))
    out = {"format": FORMAT, "time": time.time() if now is None else now, "nodes": nodes,
           "jobs": jobs}
    if move_cost_s is not None:
        out["move_cost_s"] = move_cost_s
    return out


@router.get("/status/whatif-input", tags=["operations"])
def status_whatif_input(request: Request) -> JSONResponse:
    """What ``specon whatif`` simulates: nodes, jobs with their progress and recent losses."""
    return JSONResponse(whatif_input(request.app.state.cluster,
                                     request.app.state.handlers.losses,
                                     move_cost_s=request.app.state.settings.migration_cost_s))
