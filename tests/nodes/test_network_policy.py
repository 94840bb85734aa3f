"""The chart's NetworkPolicies enforced on real nodes: kube-router's network-policy controller
(hack/kube-router/build.sh, a pinned Go build; its firewall only, no routing and no service
proxy) runs as a process in each node's network and mount namespaces, beside the kubelet and
kube-proxy, and filters the pods of the CNI bridge plugin with iptables and ipsets there. The
bridge plugin alone enforces nothing.

Pods in one namespace: a stand-in for the manager (the chart's manager pod labels, listening on
the manager's main and extender ports) on the first node; on the second node a pod with the
agents' labels, one with the scheduler's and one with none; and another unlabelled pod on the
manager's own node (its packets are bridged, not routed: br_netfilter hands them to iptables).
Each client tries both ports every half second and logs what it reached. Without a policy every
pod reaches both ports; with the chart's NetworkPolicies (``helm template`` with
``networkPolicy.enabled``) the agent reaches the main port only, the scheduler the extender port
only, the others neither; once the policies are deleted every pod reaches both again."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from nodehelp import get, wait_for
from nodelib import RealCluster, RealNode, run
from planelib import REPO, SERVICE_CIDR, Component

pytestmark = [pytest.mark.nodes, pytest.mark.plane, pytest.mark.slow]

RELEASE = "specon"
#: Chains and ipsets of kube-router's firewall (removed again after the test).
KUBE_ROUTER_PREFIXES = ("KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-", "KUBE-SRC-", "KUBE-DST-",
                        "kube-router-")
PROBE = """
import socket, sys, time
host, ports = sys.argv[1], [int(p) for p in sys.argv[2:]]
while True:
    seen = []
    for port in ports:
        try:
            socket.create_connection((host, port), timeout=1).close()
            seen.append(f"{port}:open")
        except OSError:
            seen.append(f"{port}:closed")
    print(" ".join(seen), flush=True)
    time.sleep(0.5)
"""
SERVE = """
import socket, sys, threading
def serve(port):
    s = socket.create_server(("", port))
    while True:
        s.accept()[0].close()
for port in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(port),)).start()
"""


def kube_router() -> Path:
    out = subprocess.run(["bash", str(REPO / "hack/kube-router/build.sh"), "--print"],
                         capture_output=True, text=True, check=True).stdout.strip()
    path = Path(out)
    missing = [] if path.is_file() else [
        "kube-router is not built (bash hack/kube-router/build.sh)"]
    if shutil.which("ipset") is None:
        missing.append("ipset is not installed (Debian: ipset)")
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail("; ".join(missing) + "; CI never skips it")
        pytest.skip("; ".join(missing))
    return path


def remove_firewall(node: RealNode) -> None:
    """Undo what kube-router left in the node's network namespace: the jumps into its chains,
    its chains, its ipsets. kube-proxy's rules stay."""
    def ours(name: str) -> bool:
        return name.startswith(KUBE_ROUTER_PREFIXES)

    rules = run(*node.enter("iptables", "-t", "filter", "-S")).stdout.splitlines()
    for rule in rules:
        words = rule.split()
        if words[:1] == ["-A"] and not ours(words[1]) and "-j" in words \
                and ours(words[words.index("-j") + 1]):
            run(*node.enter("iptables", "-t", "filter", "-D", *words[1:]), check=False)
    chains = [r.split()[1] for r in rules if r.startswith("-N ") and ours(r.split()[1])]
    for flag in ("-F", "-X"):
        for chain in chains:
            run(*node.enter("iptables", "-t", "filter", flag, chain), check=False)
    for name in run(*node.enter("ipset", "list", "-n"), check=False).stdout.split():
        if ours(name):
            run(*node.enter("ipset", "destroy", name), check=False)


@pytest.fixture
def firewalls(cluster: RealCluster, tmp_path: Path) -> Iterator[list[Component]]:
    """kube-router's firewall on every node, until its chains are in place."""
    binary = kube_router()
    comps = []
    try:
        for node in cluster.nodes:
            comp = Component(f"{node.name}-kube-router", node.enter(
                str(binary), f"--kubeconfig={cluster.plane.kubeconfig}",
                f"--hostname-override={node.name}", "--run-firewall=true",
                "--run-router=false", "--run-service-proxy=false", "--enable-ipv6=false",
                f"--service-cluster-ip-range={SERVICE_CIDR}", "--health-port=0",
                "--metrics-port=0", "--v=1"), tmp_path / f"{node.name}-kube-router.log")
            comp.start()
            comps.append(comp)

        def chains_in_place() -> bool:
            for node, comp in zip(cluster.nodes, comps, strict=True):
                assert comp.running(), f"kube-router on {node.name} exited:\n{comp.tail()}"
                if run(*node.enter("iptables", "-t", "filter", "-S", "KUBE-ROUTER-FORWARD"),
                       check=False).returncode != 0:
                    return False
            return True

        wait_for("kube-router's chains on every node", chains_in_place, timeout=90,
                 diagnose=lambda: "\n".join(c.tail(15) for c in comps))
        yield comps
    finally:
        for comp in comps:
            comp.stop(grace=10)
        for node in cluster.nodes:
            with contextlib.suppress(Exception):
                remove_firewall(node)


def rendered(cluster: RealCluster, namespace: str, home: Path) -> list[dict[str, Any]]:
    """The chart as `helm template` renders it into ``namespace`` with the network policies on,
    for the plane's Kubernetes version."""
    version = json.loads(cluster.plane.kubectl("version", "-o", "json").stdout)
    env = dict(os.environ, HELM_CACHE_HOME=str(home / "cache"),
               HELM_CONFIG_HOME=str(home / "config"), HELM_DATA_HOME=str(home / "data"))
    res = subprocess.run(
        [str(cluster.bin_dir / "helm"), "template", RELEASE, str(REPO / "charts" / "specon"),
         "--namespace", namespace, "--kube-version", version["serverVersion"]["gitVersion"],
         "--set", "networkPolicy.enabled=true"],
        capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def pod_labels(objs: list[dict[str, Any]], component: str) -> dict[str, str]:
    [labels] = [o["spec"]["template"]["metadata"]["labels"] for o in objs
                if o["kind"] in ("Deployment", "DaemonSet")
                and o["spec"]["template"]["metadata"]["labels"].get(
                    "app.kubernetes.io/component") == component]
    return dict(labels)


def pod(name: str, node: str, image: str, labels: dict[str, str],
        argv: list[str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": node, "restartPolicy": "Never",
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": image,
                                     "imagePullPolicy": "Never", "command": argv,
                                     "resources": {"requests": {"cpu": "10m",
                                                                "memory": "32Mi"}}}]}}


def reached(cluster: RealCluster, namespace: str, name: str, lines: int = 3) -> str | None:
    """What the client's last ``lines`` probes agree on ("8080:open 8443:closed"), or None
    while they differ (a policy being applied) or are too few."""
    res = cluster.plane.kubectl("logs", "-n", namespace, name, f"--tail={lines}", check=False)
    seen = res.stdout.split("\n")[:-1] if res.returncode == 0 else []
    return seen[0] if len(seen) == lines and len(set(seen)) == 1 else None


@pytest.mark.timeout(600)
def test_the_charts_network_policies_admit_only_the_managers_clients(
        cluster: RealCluster, namespace: str, node_images: dict[str, str],
        firewalls: list[Component], tmp_path: Path) -> None:
    objs = rendered(cluster, namespace, tmp_path / "helm")
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
    assert len(policies) == 3
    [manager] = [o for o in objs if o["kind"] == "Deployment" and o["spec"]["template"][
        "metadata"]["labels"]["app.kubernetes.io/component"] == "manager"]
    ports = sorted(p["containerPort"]
                   for p in manager["spec"]["template"]["spec"]["containers"][0]["ports"])
    main, extender = ports[0], ports[-1]
    assert (main, extender) == (8080, 8443)
    image = node_images["base"]
    first, second = cluster.node_names
    stranger = {"app.kubernetes.io/name": "stranger"}
    cluster.plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod(
        "manager", first, image, pod_labels(objs, "manager"),
        ["python3", "-c", SERVE, str(main), str(extender)])))

    def manager_ip() -> str | None:
        status = get(cluster, "pod", "-n", namespace, "manager").get("status", {})
        return status.get("podIP") if status.get("phase") == "Running" else None

    ip = wait_for("the manager stand-in to run", manager_ip, timeout=120)
    clients = {"agent": (second, pod_labels(objs, "agent")),
               "scheduler": (second, pod_labels(objs, "scheduler")),
               "stranger": (second, stranger), "neighbour": (first, stranger)}
    for name, (node, labels) in clients.items():
        cluster.plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod(
            name, node, image, labels, ["python3", "-c", PROBE, ip, str(main), str(extender)])))

    def all_reach(expected: dict[str, str]) -> bool:
        return all(reached(cluster, namespace, n) == want for n, want in expected.items())

    def diagnose() -> str:
        logs = [cluster.plane.kubectl("logs", "-n", namespace, n, "--tail=3", check=False)
                for n in clients]
        return "\n".join([*(f"{n}: {r.stdout!r}" for n, r in zip(clients, logs, strict=True)),
                          *(c.tail(10) for c in firewalls)])

    both = f"{main}:open {extender}:open"
    # Without a policy the firewall lets everything through: every pod reaches both ports.
    wait_for("every client to reach both ports", lambda: all_reach(
        dict.fromkeys(clients, both)), timeout=120, diagnose=diagnose)

    cluster.plane.kubectl("apply", "-n", namespace, "-f", "-",
                          input=json.dumps({"apiVersion": "v1", "kind": "List",
                                            "items": policies}))
    wait_for("the chart's policies to be enforced", lambda: all_reach({
        "agent": f"{main}:open {extender}:closed",
        "scheduler": f"{main}:closed {extender}:open",
        "stranger": f"{main}:closed {extender}:closed",
        "neighbour": f"{main}:closed {extender}:closed"}), timeout=90, diagnose=diagnose)

    # The refusals were the policies': without them every pod reaches both ports again.
    for p in policies:
        cluster.plane.kubectl("delete", "-n", namespace, "networkpolicy", p["metadata"]["name"])
    wait_for("every client to reach both ports again", lambda: all_reach(
        dict.fromkeys(clients, both)), timeout=90, diagnose=diagnose)
