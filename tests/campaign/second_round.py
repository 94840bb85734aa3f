"""The fault kinds of issue 32 in the campaign ("reliability, second round"): what users and
clusters do in the middle of a migration, full and read-only volumes, a slow API server and
clocks that step. Each reuses the injector of the test that drove its fix; each says what must
hold after it (``Violation`` otherwise), beside the invariants of ``campaignlib``.

- ``user-delete``: ``kubectl delete pod`` of every pod of a job while a migration of it is in
  flight (one is asked for as its agent would, when none comes; with none in 20 s, of a running
  job): the job's pods are gone and never come back, and the migration ends (its Event, or the
  manager's log line when nothing is left to name in an Event) — the deleted job is not
  counted lost (tests/manager/test_migration_deletes_plane.py).
- ``manager-removed``: both replicas get SIGTERM together (``helm uninstall``, the Deployment
  deleted), at a migration's ``placing`` when one comes within 15 s: each exits 0, and no
  replacement stays gated whose source is gone; the jobs run on with no manager for a few
  seconds, then the replicas are installed again (tests/manager/test_migration_handover_plane.py).
- ``volume-full``, ``volume-read-only``: the jobs' shared volume (a tmpfs of its own, as in
  tests/sdk/test_volume_faults.py) left without a free page, or turned read-only (a read-only
  bind mount on top), for a few seconds: no job stops or raises, every job that ran through it
  went on stepping, no temporary file or data file without its manifest is left, every job's
  last verified checkpoint still verifies, and each saves again once the volume is back.
- ``slow-apiserver``: every request of the managers and the agents held back 0.5-2 s
  (tests/manager/slowproxy.py, in front of the API server from the start, (0, 0) otherwise) for
  10-20 s: recovery as for every fault (one ready leader knowing every node fresh).
- ``clock-step``: one agent's wall clock stepped (tests/campaign/steppedclock.py) an hour
  ahead and back, two minutes ahead and back, or 250 s ahead and corrected by a restart: once
  back, its heartbeats are kept again at once — none answered and dropped as older
  (``specon_manager_heartbeats_superseded_total`` still) — and recovery as for every fault.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "manager"))  # planemanager, slowproxy

from planelib import write_kubeconfig
from planemanager import verified
from slowproxy import SlowProxy

from specon import names

if TYPE_CHECKING:
    from campaignlib import FaultRecord, Job, World

KINDS = ("user-delete", "manager-removed", "volume-full", "volume-read-only", "slow-apiserver",
         "clock-step")
A_MIGRATION = names.ANNOTATION_MIGRATION
GATE = names.GATE_MIGRATION
VOLUME_BYTES = 64 << 20
PAGE = 4096
ENDED = ("MigrationCancelled", "MigrationCompleted", "MigrationFailed", "MigrationInterrupted")
RESULTS = ("cancelled", "completed", "elsewhere", "failed", "suspended", "stayed")


def _violation(text: str) -> Exception:
    from campaignlib import Violation

    return Violation(text)


# -- the world's parts for these kinds ---------------------------------------------------------
def prepare(world: World) -> None:
    """Before anything starts: the jobs' volume (a tmpfs of its own), and the slow proxy in
    front of the API server with the kubeconfig through it (the managers' and agents')."""
    world.shared.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={VOLUME_BYTES}", "tmpfs",
                        str(world.shared)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"the volume faults need a tmpfs of their own (root, mount): "
                           f"{r.stderr.strip()}")
    host, port = world.plane.server.removeprefix("https://").rsplit(":", 1)
    world.slow = SlowProxy((host, int(port)), delay=(0.0, 0.0), seed=world.rng.randint(0, 99))
    world.slow.start()
    world.slow_kubeconfig = write_kubeconfig(
        world.workdir / "slow.kubeconfig", world.slow.url, world.plane.ca_file,
        world.plane.admin_token, "admin")


def close(world: World) -> None:
    slow = getattr(world, "slow", None)
    if slow is not None:
        slow.close()
    with open("/proc/self/mounts") as f:
        points = [ln.split()[1] for ln in f if ln.split()[1] == str(world.shared)]
    for _ in points:
        subprocess.run(["umount", "-l", str(world.shared)], check=False, capture_output=True)


# -- migrations in flight ----------------------------------------------------------------------
def in_flight(world: World) -> list[dict[str, Any]]:
    """The migration records on our pods that are not ended (``phase`` and all)."""
    out = []
    for p in world.api.pods(world.ns):
        text = (p["metadata"].get("annotations") or {}).get(A_MIGRATION)
        if not text:
            continue
        try:
            rec = json.loads(text)
        except ValueError:
            continue
        if rec.get("phase") not in ("done", "cancelled") and rec.get("kind") == "pod":
            out.append(rec)
    return out


def _job_of(world: World, pod: str) -> Job | None:
    for job in world.jobs.values():
        if pod == job.name or pod.startswith(job.name + "-"):
            return job
    return None


def _ask_for_a_move(world: World) -> str:
    """What an agent does for a converged job (``POST /v1/reallocate`` with its node's token),
    for four running jobs on the most crowded nodes, until the manager answers ``migrate``
    (which it seldom does: the jobs are spread evenly). Returns the answers, for the record."""
    with world._lock:
        running = [j for j in world.jobs.values() if j.standin.running and not j.done
                   and j.deleted is None]
        crowd = {n: sum(j.standin.node == n for j in running) for n in world.nodes}
        running.sort(key=lambda j: (-crowd.get(j.standin.node, 0), -j.standin.step))
        asks = [(j.standin.node, j.standin.pod) for j in running[:4]]
    answers: dict[str, int] = {}
    for node, pod in asks:
        try:
            r = httpx.post(f"{world.relay.url}/v1/reallocate", timeout=10, json={
                "node": node, "namespace": world.ns, "pod": pod, "time": time.time()},
                headers={"Authorization": f"Bearer {world.tokens[node]}"})
            said = r.json().get("decision", "?") if r.status_code == 200 else str(r.status_code)
        except (httpx.HTTPError, ValueError):
            said = "unreachable"
        answers[said] = answers.get(said, 0) + 1
        if said == "migrate":
            break
    return ", ".join(f"{k} {v}" for k, v in answers.items())


def catch_migration(world: World, rec: FaultRecord, phases: tuple[str, ...],
                    wait_s: float) -> dict[str, Any] | None:
    """A bare pod's migration in one of ``phases`` (polled every 0.1 s); one is asked for after
    a third of ``wait_s`` when none comes by itself (the answers go into ``rec.detail``)."""
    start = time.monotonic()
    asked = False
    while time.monotonic() - start < wait_s:
        got = [r for r in in_flight(world) if r.get("phase") in phases]
        if got:
            return got[0]
        if not asked and time.monotonic() - start > wait_s / 3 and not in_flight(world):
            rec.detail = f"asked for a move: {_ask_for_a_move(world)}"
            asked = True
        time.sleep(0.1)
    return None


def _ended(world: World, mid: str) -> str | None:
    """How migration ``mid`` ended: its Event, or (when everything it could name was deleted,
    and so no Event) the leader's log line."""
    for e in world.api.event_items(world.ns):
        if e.get("reason") in ENDED and f"migration {mid}" in (e.get("note") or ""):
            return str(e["reason"])
    for m in world.managers:
        text = m.log.read_text(errors="replace") if m.log.exists() else ""
        found = re.search(rf"migration {mid} ({'|'.join(RESULTS)})\b", text)
        if found:
            return f"{found.group(1)} (log)"
    return None


# -- the faults ----------------------------------------------------------------------------------
def f_user_delete(world: World, rec: FaultRecord, _: Any) -> None:
    phases = world.rng.choice([("reserved", "checkpointing"), ("evicting", "placing")])
    m = catch_migration(world, rec, phases, 12) or catch_migration(
        world, rec, ("reserved", "checkpointing", "evicting", "placing"), 8)
    with world._lock:
        job = _job_of(world, m["pod"]) if m is not None else None
        if job is None or job.done or job.deleted is not None:
            m = None
            running = [j for j in world.jobs.values() if j.standin.running and not j.done
                       and j.deleted is None]
            job = world.rng.choice(running) if running else None
        if job is None:
            rec.detail = "no job to delete"
            return
        world.plane.kubectl("delete", "pod", "-n", world.ns, "-l", f"campaign-job={job.name}",
                            "--wait=false")
        job.deleted = time.monotonic()
    where = (f"migration {m['id']} in {m['phase']}" if m else
             f"no migration in flight ({rec.detail or 'none asked for'})")
    rec.detail = f"{job.name} deleted by its user, {where}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not [p for p in world.api.pods(world.ns)
                if (p["metadata"].get("labels") or {}).get("campaign-job") == job.name]:
            break
        time.sleep(0.2)
    else:
        raise _violation(f"user-delete: the pods of {job.name} still there 30 s after the delete")
    if m is not None:
        end = _ended(world, m["id"])
        while end is None and time.monotonic() < deadline:
            time.sleep(0.3)
            end = _ended(world, m["id"])
        if end is None:
            raise _violation(f"user-delete: migration {m['id']} of the deleted {job.name} did "
                             "not end within 30 s")
        rec.detail += f", ended {end}"


def f_manager_removed(world: World, rec: FaultRecord, _: Any) -> None:
    m = catch_migration(world, rec, ("placing",), 15)
    for mgr in world.managers:  # both at once, as when the Deployment is deleted
        mgr.terminate()
    codes = {}
    for mgr in world.managers:
        try:
            codes[mgr.settings["identity"]] = mgr.wait_exit(60)
        except subprocess.TimeoutExpired:
            mgr.kill()
            codes[mgr.settings["identity"]] = "killed after 60 s"
    bad = {k: c for k, c in codes.items() if c != 0}
    if bad:
        world.violations.append(f"manager-removed: replicas did not exit 0 on SIGTERM: {bad}")
    left = _gated_for_good(world)
    away = world.rng.uniform(3, 8)
    where = (f"migration {m['id']} in placing" if m else
             f"no migration in placing; {rec.detail or 'none asked for'}")
    rec.detail = f"both replicas stopped ({where}), reinstalled after {away:.1f} s"
    if left:
        world.violations.append(f"manager-removed: replacements gated with their source gone "
                                f"and no manager left: {left}")
    time.sleep(away)  # no manager at all: the jobs run on, the scheduler places alone
    for mgr in world.managers:
        mgr.start(wait="serving")
    rec.lifted = time.monotonic()


def _gated_for_good(world: World) -> list[str]:
    pods = world.api.pods(world.ns)
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    out = []
    for p in pods:
        gates = [g.get("name") for g in p["spec"].get("schedulingGates") or []]
        if GATE not in gates:
            continue
        try:
            rec = json.loads((p["metadata"].get("annotations") or {})[A_MIGRATION])
        except (KeyError, ValueError):
            out.append(p["metadata"]["name"])
            continue
        if uids.get(rec.get("pod")) != rec.get("pod_uid"):
            out.append(p["metadata"]["name"])
    return out


def _free_pages(path: Path) -> int:
    return os.statvfs(path).f_bavail


Check = Callable[[], None]  # what must hold once the world has recovered


def f_volume_full(world: World, rec: FaultRecord, _: Any) -> Check:
    held = world.rng.uniform(3, 8)
    filler = world.shared / "filler"
    before = _through(world)
    with filler.open("wb", buffering=0) as f:  # unbuffered: nothing left to flush at close
        try:
            while True:
                f.write(b"\0" * max(PAGE, _free_pages(world.shared) * PAGE))
        except OSError:
            pass  # full
    rec.detail = f"the jobs' volume full for {held:.1f} s"
    time.sleep(held)
    filler.unlink()
    rec.lifted = time.monotonic()
    return _volume_invariants(world, "volume-full", before)


def f_volume_read_only(world: World, rec: FaultRecord, _: Any) -> Check:
    held = world.rng.uniform(3, 8)
    before = _through(world)
    shared = str(world.shared)
    for _ in range(20):  # a write opened between the two mounts makes the second one busy
        with world._lock:
            subprocess.run(["mount", "--bind", shared, shared], check=True)
            r = subprocess.run(["mount", "-o", "remount,bind,ro", shared], capture_output=True)
            if r.returncode == 0:
                break
            subprocess.run(["umount", "-l", shared], check=False)
        time.sleep(0.1)
    else:
        raise RuntimeError("could not turn the jobs' volume read-only")
    rec.detail = f"the jobs' volume read-only for {held:.1f} s"
    time.sleep(held)
    subprocess.run(["umount", "-l", shared], check=True)
    rec.lifted = time.monotonic()
    return _volume_invariants(world, "volume-read-only", before)


def _through(world: World) -> dict[str, tuple[str, int]]:
    """The running jobs: name -> (pod uid, step)."""
    with world._lock:
        return {j.name: (j.standin.uid, j.standin.step) for j in world.jobs.values()
                if j.standin.running and not j.done}


def _volume_invariants(world: World, kind: str, before: dict[str, tuple[str, int]]) -> Check:
    """What must hold as the volume comes back; returns what must hold after the recovery."""
    with world._lock:
        for name, (uid, step) in before.items():
            s = world.jobs[name].standin
            if s.uid == uid and s.exit_code not in (None, 0, 143):
                raise _violation(f"{kind}: {name} exited {s.exit_code} on the bad volume")
            if s.uid == uid and s.running and s.step <= step:
                raise _violation(f"{kind}: {name} stopped stepping on the bad volume "
                                 f"(step {s.step})")
    first = _leftovers(world)
    time.sleep(0.5)  # what a write in progress has open is gone by then
    left = sorted(set(first) & set(_leftovers(world)))
    if left:
        raise _violation(f"{kind}: partial files left behind: {left}")
    with world._lock:
        for job in world.jobs.values():
            saved = job.standin.saved()
            if saved is not None and not job.corrupted and not verified(
                    job.standin.directory, saved):
                raise _violation(f"{kind}: {job.name}'s last checkpoint {saved['checkpoint']} "
                                 "no longer verifies")
    with world._lock:
        back = {n: world.jobs[n].standin.step for n in before}

    def saves_again() -> None:
        """Each job still running in the same pod saves again once the volume is back."""
        deadline = time.monotonic() + 30
        while True:
            with world._lock:
                waiting = [n for n, (uid, _) in before.items()
                           if (s := world.jobs[n].standin).uid == uid and s.running
                           and not world.jobs[n].done
                           and int((s.saved() or {}).get("step", 0)) <= back[n]]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise _violation(f"{kind}: no save since the volume came back: {waiting}")
            time.sleep(0.5)

    return saves_again


def _leftovers(world: World) -> list[str]:
    out = []
    jobs = world.shared / world.ns / "jobs"
    with world._lock:
        for d in jobs.iterdir() if jobs.is_dir() else []:
            names = {p.name for p in d.iterdir()}
            out += [f"{d.name}/{n}" for n in names if n.startswith(".tmp-") or (
                n.startswith("ckpt-") and not n.endswith(".json")
                and f"{n.rsplit('.', 1)[0]}.json" not in names)]
    return out


def f_slow_apiserver(world: World, rec: FaultRecord, _: Any) -> None:
    lasting = world.rng.uniform(10, 20)
    before = world.slow.delayed
    world.slow.delay = (0.5, 2.0)
    time.sleep(lasting)
    world.slow.delay = (0.0, 0.0)
    rec.detail = (f"every request held back 0.5-2 s for {lasting:.1f} s "
                  f"({world.slow.delayed - before} held)")
    rec.lifted = time.monotonic()


def f_clock_step(world: World, rec: FaultRecord, _: Any) -> Check:
    a = world.agents[world.rng.choice(world.nodes)]
    step, how = world.rng.choice([(3600.0, "back"), (120.0, "back"), (250.0, "restart")])
    held = world.rng.uniform(3, 6)
    a.clock_file.write_text(str(step))
    time.sleep(held)
    a.clock_file.write_text("0")
    if how == "restart":
        a.stop()
        a.start()
    rec.detail = f"{a.node}'s clock {step:+.0f} s for {held:.1f} s, then {how}"
    rec.lifted = time.monotonic()
    superseded = _superseded(world)

    def kept_at_once() -> None:
        time.sleep(3)  # a few heartbeats more
        dropped = _superseded(world) - superseded
        if dropped > 2:
            raise _violation(f"clock-step: {dropped:.0f} heartbeats of {a.node} answered and "
                             "dropped as older after its clock was set right")

    return kept_at_once


def _superseded(world: World) -> float:
    from campaignlib import _metric

    total = 0.0
    for m in world.managers:
        try:
            text = httpx.get(f"{m.url}/metrics", timeout=2).text
        except httpx.HTTPError:
            continue
        total += _metric(text, "specon_manager_heartbeats_superseded_total") or 0.0
    return total


INJECTORS = {
    "user-delete": f_user_delete,
    "manager-removed": f_manager_removed,
    "volume-full": f_volume_full,
    "volume-read-only": f_volume_read_only,
    "slow-apiserver": f_slow_apiserver,
    "clock-step": f_clock_step,
}
