"""Observe mode on two real nodes (issue 30, "try before you enforce"): `helm install --set
mode=observe`, the e2e's four training Jobs on one node (test_e2e.py: a sleeper whose limit the
agent lowers, two CPU-bound copies, the migratable CNN whose move to the empty node pays), and
SpeCon decides as when enforcing and acts on nothing: every container's CFS quota stays the
kubelet's, every pod stays where it was placed, never asked to checkpoint; the WouldLimitCPU
and WouldMigrate Events and the would-be metrics show what enforcing would have done; and
`specon whatif` (the user's kubeconfig, the default release's manager) predicts the gain for
this cluster now."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from nodehelp import get, pods, wait_for
from nodelib import RealCluster
from test_e2e import (
    MIGRATABLE,
    RELEASE,
    REPO,
    SYSTEM,
    LimitWatch,
    helm,
    install_args,
    save_logs,
    shared_volumes,
    submit_the_four_jobs,
)

pytestmark = [pytest.mark.nodes, pytest.mark.plane, pytest.mark.slow]

KUBELET_QUOTA = 100_000  # every example asks for a limit of one CPU
#: What /metrics of a pod answers, read from inside it (its image has Python).
SCRAPE = ("import ssl, sys, urllib.request; ctx = ssl._create_unverified_context(); "
          "print(urllib.request.urlopen(sys.argv[1], context=ctx, timeout=10).read().decode())")


def scrape(cluster: RealCluster, pod: str, container: str, url: str, prefix: str) -> list[str]:
    res = cluster.plane.kubectl("exec", "-n", SYSTEM, pod, "-c", container, "--", "python3",
                                "-c", SCRAPE, url, check=False)
    return [ln for ln in res.stdout.splitlines() if ln.startswith(prefix)]


def component(cluster: RealCluster, name: str) -> list[dict[str, Any]]:
    return [p for p in pods(cluster, SYSTEM)
            if p["metadata"]["labels"].get("app.kubernetes.io/component") == name]


def test_observe_mode_on_real_nodes_changes_no_limit_and_moves_no_pod(
        cluster: RealCluster, node_images: dict[str, str], tmp_path: Path) -> None:
    k = cluster.plane.kubectl
    first, second = cluster.node_names
    training = "observing"
    home = tmp_path / "helm"
    k("create", "namespace", training)
    shared_volumes(cluster, cluster.workdir / "shared", training)
    watch = LimitWatch()
    install = install_args(node_images)
    install[install.index("manager.trainingNamespaces={training}")] = (
        f"manager.trainingNamespaces={{{training}}}")
    # The move pays once its predicted gain passes its cost: a cost of 2 s instead of the e2e's
    # 20 s lets it pay about a minute earlier (the decision is the same rule's).
    helm(cluster, home, *install, "--set", "mode=observe",
         "--set", "manager.migration.costSeconds=2")
    try:
        k("cordon", second)
        submit_the_four_jobs(cluster, training, node_images)
        placed = {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in pods(cluster, training)}
        assert set(placed.values()) == {first}
        k("uncordon", second)

        def events() -> list[dict[str, Any]]:
            items: list[dict[str, Any]] = get(
                cluster, "events.events.k8s.io", "-n", training)["items"]
            return items

        def told() -> bool:
            watch.sample(cluster, training)
            seen = {e.get("reason") for e in events()}
            return {"WouldLimitCPU", "WouldMigrate"} <= seen

        def status() -> str:
            return (save_logs(cluster) + k("get", "pods", "-n", training, "-o", "wide").stdout
                    + k("get", "events", "-n", training).stdout[-3000:])

        wait_for("the would-be limits and the would-be move", told, timeout=420, every=1,
                 diagnose=status)
        for _ in range(5):  # a few more samples of every quota
            watch.sample(cluster, training)

        # -- nothing changed: the kernel's quotas, the pods, the checkpoints ----------------------
        assert watch.seen and all(q == {KUBELET_QUOTA} for q in watch.seen.values()), (
            watch.seen, status())
        assert all(q == {KUBELET_QUOTA} for q in watch.pod_seen.values()), watch.pod_seen
        now = {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in pods(cluster, training)
               if not p["metadata"].get("deletionTimestamp")}
        assert now == placed, status()
        reasons = {e.get("reason") for e in events()}
        assert not reasons & {"MigrationStarted", "CheckpointRequested", "MigrationEvicted",
                              "CPULimitLowered", "CPULimitRaised"}, reasons
        assert not (cluster.workdir / "shared" / training / "jobs" / MIGRATABLE /
                    "request.json").exists()
        marks = get(cluster, "job", "-n", training, MIGRATABLE)["metadata"].get(
            "annotations", {})
        assert not [m for m in marks if m.startswith("specon.io/migrat")], marks

        # -- and what enforcing would have done is told -------------------------------------------
        move = next(e for e in events() if e.get("reason") == "WouldMigrate")
        assert move["regarding"]["name"].startswith(MIGRATABLE)
        assert f"from {first} to {second}" in move["note"], move["note"]
        limits = [e for e in events() if e.get("reason") == "WouldLimitCPU"]
        assert all("(not written)" in e["note"] for e in limits)
        [manager] = component(cluster, "manager")
        assert scrape(cluster, manager["metadata"]["name"], "manager",
                      "https://127.0.0.1:8080/metrics",
                      "specon_manager_would_migrations_total{"), status()
        would = [ln for a in component(cluster, "agent") for ln in scrape(
            cluster, a["metadata"]["name"], "agent", "http://127.0.0.1:9108/metrics",
            "specon_agent_job_would_cpu_limit_cores{")]
        assert any('pod="quadratic-c' in ln for ln in would), would

        # -- and `specon whatif` predicts what enforcing would gain on this cluster now ----------
        got = subprocess.run(
            [sys.executable, "-m", "specon", "whatif", "--seeds", "1", "--json"],
            env={**os.environ, "KUBECONFIG": str(cluster.plane.kubeconfig),
                 "PYTHONPATH": str(REPO)},
            capture_output=True, text=True, timeout=300, check=False)
        assert got.returncode == 0, got.stderr
        told = json.loads(got.stdout)
        # (5 in two full runs: test_e2e's late job, still ending on real-2, was counted; the
        # conftest's earlier_tests_gone now waits for such pods before a test starts)
        assert told["jobs"] == 4 and set(told["policies"]) == {"default", "progress"}, (
            told, k("get", "pods", "-A", "-o", "wide").stdout)
    finally:
        save_logs(cluster)
        helm(cluster, home, "uninstall", RELEASE, "--namespace", SYSTEM, "--wait",
             "--timeout", "3m")
        k("delete", "namespace", training, "--wait=false", check=False)
