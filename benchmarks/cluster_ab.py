"""SpeCon against no SpeCon on real nodes: real kubelet + containerd nodes of unequal CPU on this
machine (tests/nodelib.py), real training Jobs of specon_examples submitted with kubectl.

Usage: python benchmarks/cluster_ab.py [--jobs 8] [--repeats 5] [--nodes 0.75,0.5,0.25]
       [--gap 20] [--scale 1] [--calibrate-s 20] [--out results/cluster-ab]

Needs root, the test plane's binaries (``SPECON_TESTPLANE_BIN``, docs/testplane.md), the local
Docker engine and what tests/nodes needs (hack/test.sh sets it up). Starts a plane and one node
per ``--nodes`` cap: each node's cgroup is capped at that many CPUs (the rest of the host,
about half a core on two, stays with the control plane) and its kubelet reserves the rest, so
that its allocatable is its cap. All nodes share one checkpoint folder (hostPath
PersistentVolumes standing in for NFS, as in tests/nodes/test_e2e.py).

The jobs: ``--jobs`` Jobs of the examples (cnn, mlp, vae, gru in turn), of 150, 60, 100 and 40
seconds of one core in turn (times ``--scale``, lengths from the shipped profiles), one every
``--gap`` seconds, no CPU limit (on cgroup v1 a pod may not be given more than its node's cap)
and equal requests: equal CFS shares. Arms, alternating in each repeat: ``none`` (the plane's
kube-scheduler, no SpeCon) and ``specon`` (`helm install` of the chart under its shipped
default, with tests/nodes' compressed clock: 10 s intervals; uninstalled after the arm).

Calibration (``--calibrate-s``, 0: the shipped profiles' figures): each model alone on the
largest node, its seconds per iteration read from its progress records. The simulator then
runs the same jobs on workers of the same caps (runner.run_one: ``default`` for no SpeCon,
``progress`` for SpeCon) with each job's loss curve as logged in the first no-SpeCon run.

Writes OUT/cluster-ab.json (spec, every job's progress records, summaries, aggregate with 95%
intervals, prediction) and OUT/cluster-ab.md; progress on stderr. Exit 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "nodes"),
                str(ROOT / "benchmarks")]

import yaml  # noqa: E402
from cluster_ab_report import (  # noqa: E402
    aggregate,
    markdown,
    predict,
    run_summary,
)
from nodehelp import get, pods, running_container_id  # noqa: E402
from nodelib import RealCluster  # noqa: E402
from test_e2e import (  # noqa: E402
    RELEASE,
    SYSTEM,
    example,
    helm,
    install_args,
    progress_records,
    save_logs,
    shared_volume_name,
    shared_volumes,
)

from specon.sim.experiments import shipped_profiles  # noqa: E402

#: (model, its shipped profile), in the order jobs take them.
MIX = (("cnn", "cnn-synthetic"), ("mlp", "mlp-digits"), ("vae", "vae-digits"),
       ("gru", "gru-digits"))
#: One-core seconds of the jobs, in turn.
LENGTHS_S = (150.0, 60.0, 100.0, 40.0)
INTERVAL_S = 10.0  # the compressed clock of install_args()


def say(msg: str) -> None:
    print(f"[cluster-ab {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Job:
    name: str
    model: str
    profile: str
    iterations: int
    submit_s: float


def seconds_per_iteration(profile: str) -> float:
    """One core's seconds per iteration of a shipped profile."""
    return shipped_profiles()[profile].cpu_seconds_per_iteration


def make_jobs(n: int, gap_s: float, scale: float) -> list[Job]:
    out = []
    for i in range(n):
        model, profile = MIX[i % len(MIX)]
        per_it = seconds_per_iteration(profile)
        its = max(10, round(LENGTHS_S[i % len(LENGTHS_S)] * scale / per_it))
        out.append(Job(f"j{i + 1}-{model}", model, profile, its, i * gap_s))
    return out


def manifest(name: str, model: str, iterations: int, namespace: str, specon: bool,
             images: dict[str, str], node: str | None = None) -> dict[str, Any]:
    """deploy/examples/migratable-job.yaml made this job: its model and length, its own
    checkpoint folder, equal requests and no CPU limit; the plane's scheduler without SpeCon."""
    job = example("migratable-job.yaml", images)[1]
    job["metadata"] = {"name": name, "namespace": namespace,
                       "labels": {"app.kubernetes.io/name": name}}
    tpl = job["spec"]["template"]
    tpl["metadata"]["annotations"].update({
        "specon.io/checkpoint-dir": f"jobs/{name}",
        "specon.io/progress-file": f"jobs/{name}/progress.jsonl",
        "specon.io/total-steps": str(iterations)})
    spec = tpl["spec"]
    spec["schedulerName"] = "specon" if specon else "default-scheduler"
    if node:
        spec["nodeName"] = node
    c = spec["containers"][0]
    c["args"] = [model, "--iterations", str(iterations), "--threads", "1",
                 "--log-every", str(max(1, iterations // 100))]
    c["env"] = [{"name": "SPECON_CHECKPOINT_DIR", "value": f"/shared/jobs/{name}"},
                {"name": "SPECON_PROGRESS_FILE", "value": f"/shared/jobs/{name}/progress.jsonl"}]
    c["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"},
                      "limits": {"memory": "1Gi"}}
    return job


class Bench:
    """One benchmark on a running cluster (the CLI's own, or the tests' session cluster)."""

    def __init__(self, cluster: RealCluster, images: dict[str, str], caps: dict[str, float],
                 workdir: Path) -> None:
        self.cluster, self.images, self.caps = cluster, images, caps
        self.k = cluster.plane.kubectl
        self.ns = f"bench-{uuid.uuid4().hex[:8]}"
        self.shared = cluster.workdir / "shared"  # the root test_e2e's release volume uses
        self.helm_home = workdir / "helm"
        self.k("create", "namespace", self.ns)
        self._volumes()
        claim = example("migratable-job.yaml", images)[0]
        self.k("apply", "-n", self.ns, "-f", "-", input=yaml.safe_dump(claim))

    def _volumes(self) -> None:
        pv = shared_volume_name("release", self.ns)
        phase = self.k("get", "pv", pv, "-o", "jsonpath={.status.phase}", check=False).stdout
        if phase in ("Released", "Failed"):  # its claim was deleted: bind a fresh one
            self.k("delete", "pv", pv, "--wait")
        shared_volumes(self.cluster, self.shared, self.ns)

    def run_arm(self, arm: str, repeat: int, jobs: Sequence[Job], timeout_s: float,
                node: str | None = None) -> dict[str, Any]:
        specon = arm == "specon"
        if specon:
            self._volumes()
            say(f"repeat {repeat}: helm install (shipped default policy)")
            helm(self.cluster, self.helm_home, *install_args(self.images),
                 "--set", f"manager.trainingNamespaces={{{self.ns}}}")
        prefix = f"r{repeat}{arm[0]}"
        todo = sorted(jobs, key=lambda j: j.submit_s)
        out = {j.name: {"name": f"{prefix}-{j.name}", "base": j.name, "model": j.model,
                        "iterations": j.iterations, "submit_s": j.submit_s, "submitted": None,
                        "finished": None, "status": "pending", "nodes": []} for j in jobs}
        t0 = time.time()
        say(f"repeat {repeat}, arm {arm}: {len(jobs)} jobs")
        try:
            while True:
                now = time.time()
                while todo and t0 + todo[0].submit_s <= now:
                    j = todo.pop(0)
                    doc = manifest(out[j.name]["name"], j.model, j.iterations, self.ns, specon,
                                   self.images, node)
                    self.k("apply", "-f", "-", input=yaml.safe_dump(doc))
                    out[j.name]["submitted"] = time.time()
                self._poll(out)
                left = [o for o in out.values() if o["status"] not in ("succeeded", "failed")]
                if not left:
                    break
                if now - t0 > timeout_s:
                    say(f"arm {arm} timed out after {timeout_s:.0f} s: {[o['name'] for o in left]}")
                    break
                time.sleep(1.0)
        finally:
            if specon:
                # the manager's and agents' logs, beside the nodes' (save_logs: <pod>.log)
                save_logs(self.cluster)
                helm(self.cluster, self.helm_home, "uninstall", RELEASE, "--namespace", SYSTEM,
                     "--wait", "--timeout", "3m")
            # the pods gone too before the next arm starts (none left computing)
            self.k("delete", "jobs", "-n", self.ns, "--all", "--cascade=foreground",
                   "--timeout=180s", check=False)
        for o in out.values():
            folder = self.shared / self.ns / "jobs" / o["name"]
            o["records"] = progress_records(folder / "progress.jsonl")
        say(f"repeat {repeat}, arm {arm}: done in {time.time() - t0:.0f} s")
        return {"arm": arm, "repeat": repeat, "started": t0, "jobs": list(out.values()),
                "logs": str(self.cluster.workdir)}

    def _poll(self, out: dict[str, dict[str, Any]]) -> None:
        by_name = {o["name"]: o for o in out.values()}
        for job in get(self.cluster, "jobs", "-n", self.ns)["items"]:
            o = by_name.get(job["metadata"]["name"])
            st = job.get("status", {})
            if o is None or o["status"] in ("succeeded", "failed"):
                continue
            if st.get("succeeded"):
                o["status"] = "succeeded"
                o["finished"] = time.time()
                done = st.get("completionTime")
                if done:  # the controller's time (seconds) is the finish; ours is 1 s late at most
                    o["finished"] = min(o["finished"], datetime.fromisoformat(
                        done.replace("Z", "+00:00")).timestamp() + 1.0)
            elif any(c["type"] == "Failed" and c["status"] == "True"
                     for c in st.get("conditions", [])):
                o["status"] = "failed"
            else:
                o["status"] = "running" if st.get("active") else "pending"
        for p in pods(self.cluster, self.ns):
            o = by_name.get(p["metadata"].get("labels", {}).get("job-name", ""))
            node = p["spec"].get("nodeName")
            if o is not None and node and running_container_id(p) and node not in o["nodes"]:
                o["nodes"].append(node)

    def calibrate(self, jobs: Sequence[Job], seconds: float) -> dict[str, float]:
        """Seconds per iteration on one core of each model, measured alone on the largest node
        (a node capped below one core gives it its cap)."""
        node = max(self.caps, key=lambda n: self.caps[n])
        cores = min(1.0, self.caps[node])
        out: dict[str, float] = {}
        for model, profile in sorted({(j.model, j.profile) for j in jobs}):
            per_it = seconds_per_iteration(profile)
            probe = Job(f"cal-{model}", model, profile, max(20, round(seconds / per_it)), 0.0)
            run = self.run_arm("none", 0, [probe], timeout_s=20 * seconds + 300, node=node)
            pts = sorted((r["step"], r["time"]) for r in run["jobs"][0]["records"]
                         if r.get("event") == "progress")
            half = pts[len(pts) // 2:]  # past the start-up (imports, first steps)
            if len(half) >= 2 and half[-1][0] > half[0][0]:
                out[model] = cores * (half[-1][1] - half[0][1]) / (half[-1][0] - half[0][0])
            else:
                out[model] = per_it
            say(f"calibration: {model} {out[model]:.5f} s per iteration on one core "
                f"(profile: {per_it:.5f})")
        return out

    def close(self) -> None:
        self.k("delete", "namespace", self.ns, "--wait=false", check=False)
        for who in ("release", "training"):  # the cluster as found: its volumes go too
            self.k("delete", "pv", shared_volume_name(who, self.ns), "--wait=false",
                   "--ignore-not-found", check=False)


def benchmark(cluster: RealCluster, images: dict[str, str], jobs: Sequence[Job], repeats: int,
              caps: dict[str, float], out_dir: Path, calibrate_s: float = 0.0,
              arm_timeout_s: float | None = None) -> dict[str, Any]:
    """Run both arms ``repeats`` times (alternating which goes first) on ``cluster`` and write
    the record; returns it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    bench = Bench(cluster, images, caps, out_dir)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    work = sum(j.iterations * seconds_per_iteration(j.profile) for j in jobs)
    timeout = arm_timeout_s or 4 * work / sum(caps.values()) + 600
    try:
        if calibrate_s > 0:
            calibration, source = bench.calibrate(jobs, calibrate_s), "measured on these nodes"
        else:
            calibration = {j.model: seconds_per_iteration(j.profile) for j in jobs}
            source = "the shipped profiles (not measured on these nodes)"
        raw = []
        for rep in range(1, repeats + 1):
            for arm in (("none", "specon") if rep % 2 else ("specon", "none")):
                raw.append(bench.run_arm(arm, rep, jobs, timeout))
    finally:
        bench.close()
    spec = {"jobs": [vars(j) for j in jobs], "repeats": repeats, "nodes": caps,
            "host_cpus": os.cpu_count(), "interval_s": INTERVAL_S, "calibration": calibration,
            "calibration_source": source, "namespace": bench.ns}
    summaries = [run_summary(r) for r in raw]
    record: dict[str, Any] = {"format": "specon-cluster-ab/v1", "started": started,
                              "spec": spec, "runs": raw, "summaries": summaries,
                              "aggregate": aggregate(summaries)}
    try:
        record["prediction"] = predict(spec, raw, seeds=max(repeats, 3))
    except Exception as exc:  # the measured record is kept whatever the simulator says
        record["prediction"] = None
        record["prediction_error"] = f"{type(exc).__name__}: {exc}"
        say(f"no prediction: {record['prediction_error']}")
    (out_dir / "cluster-ab.json").write_text(json.dumps(record, indent=1))
    (out_dir / "cluster-ab.md").write_text(markdown(record))
    say(f"wrote {out_dir / 'cluster-ab.json'} and {out_dir / 'cluster-ab.md'}")
    return record


def parse_caps(text: str) -> list[float]:
    try:
        caps = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of CPUs: {text!r}") from None
    host = os.cpu_count() or 1
    if len(caps) < 1 or any(not 0.05 <= c <= host for c in caps):
        raise argparse.ArgumentTypeError(f"each cap must lie in 0.05..{host} CPUs: {text!r}")
    return caps


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=8, help="training Jobs per arm (>= 2)")
    ap.add_argument("--repeats", type=int, default=5, help="paired repeats (>= 1)")
    ap.add_argument("--nodes", type=parse_caps, default=[0.75, 0.5, 0.25],
                    help="CPU cap of each node, comma-separated (default 0.75,0.5,0.25)")
    ap.add_argument("--gap", type=float, default=20.0, help="seconds between arrivals")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every job's length")
    ap.add_argument("--calibrate-s", type=float, default=20.0,
                    help="one-core seconds of each model's calibration run (0: none)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "cluster-ab")
    args = ap.parse_args(argv)
    if args.jobs < 2 or args.repeats < 1 or args.gap < 0 or not args.scale > 0 \
            or args.calibrate_s < 0:
        ap.error("need --jobs >= 2, --repeats >= 1, --gap >= 0, --scale > 0, --calibrate-s >= 0")
    total = sum(args.nodes)
    if total > (os.cpu_count() or 1) - 0.25:
        ap.error(f"the caps add up to {total:g} CPUs: leave the control plane at least a "
                 f"quarter of this host's {os.cpu_count()}")
    from nodehelp import build_node_images
    from planelib import require_bin_dir

    bin_dir = require_bin_dir()
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"cluster-ab-{uuid.uuid4().hex[:6]}"
    say(f"images (cached builds) and {len(args.nodes)} nodes capped at {args.nodes} under {work}")
    images = build_node_images(bin_dir, work / "images")
    cluster = RealCluster.start(bin_dir, work / "nodes", [v for k, v in images.items()
                                                          if k != "pause"],
                                count=len(args.nodes), prefix="ab", cpu_caps=args.nodes)
    try:
        caps = dict(zip(cluster.node_names, args.nodes, strict=True))
        jobs = make_jobs(args.jobs, args.gap, args.scale)
        record = benchmark(cluster, images, jobs, args.repeats, caps, args.out,
                           calibrate_s=args.calibrate_s * args.scale)
    finally:
        cluster.stop()
    print(markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
