"""The agents' ServiceMonitor as the Prometheus Operator turns it into a scrape job, run by a
real Prometheus (Debian's package, hack/test.d/40-prometheus.sh) against the agent's real
``/metrics`` server: a job's ``namespace``, ``pod`` and ``container`` survive the Operator's
relabelling (the chart's ``metricRelabelings``, which act whatever a Prometheus's
overrideHonorLabels says); without them they do not (the chart before: the job's pod in
``exported_pod`` and the agent's in ``pod``), so the test can fail. The job dashboard's
variables (namespace, then pod) list the job, and each of its panels selects it.

``operator_scrape_config`` writes what prometheus-operator's ``generateServiceMonitorConfig``
(pkg/prometheus/promcfg.go) writes for one endpoint of a ServiceMonitor with role
``endpoints``; its golden file pkg/prometheus/testdata/GenerateRelabelConfig.golden shows the
same rules for another monitor. Left out: the sharding
rules (one shard keeps every target) and what the chart's monitor does not use (jobLabel,
targetLabels, podTargetLabels, matchExpressions). Two parts are stand-ins: Kubernetes service
discovery is a static target carrying the ``__meta_kubernetes_*`` labels discovery gives the
agent pod's endpoint (no API server to discover from), and the agent's registry holds one job's
series set the way its loop sets them (``publish_metrics``: by namespace, pod, container)
rather than a job it follows (that needs the Docker Engine, as tests/deploy/test_prometheus.py)."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deploylib import CHART, docs, one, render
from planelib import free_port
from test_alerts import _binary
from test_prometheus import _get, _wait, exprs_of

from specon_agent.health import LoopWatchdog, serve
from specon_agent.metrics import AgentMetrics

pytestmark = pytest.mark.slow

NS = "specon-system"
AGENT_POD = "specon-agent-7xk2p"
NODE = "worker-3"
JOB = ("team-a", "resnet-0", "main")  # the job's namespace, pod, container


def _label_name(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)  # the Operator's sanitizeLabelName


def _relabel(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The CRD's RelabelConfig as Prometheus's (the Operator's generateRelabelConfig)."""
    keys = {"sourceLabels": "source_labels", "separator": "separator",
            "targetLabel": "target_label", "regex": "regex", "modulus": "modulus",
            "replacement": "replacement", "action": "action"}
    out = []
    for rule in rules:
        cfg = {keys[k]: v for k, v in rule.items()}
        if "action" in cfg:
            cfg["action"] = cfg["action"].lower()
        out.append(cfg)
    return out


def operator_scrape_config(monitor: dict[str, Any], index: int) -> dict[str, Any]:
    """The scrape job the Operator writes for ``monitor``'s endpoint ``index``, less its
    ``kubernetes_sd_configs`` (the caller adds the targets)."""
    ep = monitor["spec"]["endpoints"][index]
    meta = monitor["metadata"]
    relabel: list[dict[str, Any]] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
    for key, value in sorted(monitor["spec"]["selector"]["matchLabels"].items()):
        relabel.append({"action": "keep", "regex": f"({value});true", "source_labels": [
            f"__meta_kubernetes_service_label_{_label_name(key)}",
            f"__meta_kubernetes_service_labelpresent_{_label_name(key)}"]})
    relabel.append({"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"],
                    "regex": ep["port"]})
    target = ["__meta_kubernetes_endpoint_address_target_kind",
              "__meta_kubernetes_endpoint_address_target_name"]
    relabel += [
        {"source_labels": target, "separator": ";", "regex": "Node;(.*)",
         "replacement": "${1}", "target_label": "node"},
        {"source_labels": target, "separator": ";", "regex": "Pod;(.*)",
         "replacement": "${1}", "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
         "regex": "(Failed|Succeeded)"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job",
         "replacement": "${1}"},
        {"target_label": "endpoint", "replacement": ep["port"]},
        *_relabel(ep.get("relabelings", [])),
    ]
    return {"job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{index}",
            # AddHonorLabels (a Prometheus's overrideHonorLabels would make it false).
            "honor_labels": bool(ep.get("honorLabels")),
            "metrics_path": ep.get("path", "/metrics"),
            "relabel_configs": relabel,
            "metric_relabel_configs": _relabel(ep.get("metricRelabelings", []))}


def discovered(service: dict[str, Any], address: str) -> dict[str, str]:
    """The meta labels Kubernetes discovery (role endpoints) gives the agent pod's endpoint."""
    labels = {"__address__": address,
              "__meta_kubernetes_namespace": service["metadata"]["namespace"],
              "__meta_kubernetes_service_name": service["metadata"]["name"],
              "__meta_kubernetes_endpoint_port_name": service["spec"]["ports"][0]["name"],
              "__meta_kubernetes_endpoint_ready": "true",
              "__meta_kubernetes_endpoint_address_target_kind": "Pod",
              "__meta_kubernetes_endpoint_address_target_name": AGENT_POD,
              "__meta_kubernetes_pod_name": AGENT_POD,
              "__meta_kubernetes_pod_container_name": "agent",
              "__meta_kubernetes_pod_node_name": NODE,
              "__meta_kubernetes_pod_phase": "Running"}
    for key, value in service["metadata"]["labels"].items():
        labels[f"__meta_kubernetes_service_label_{_label_name(key)}"] = value
        labels[f"__meta_kubernetes_service_labelpresent_{_label_name(key)}"] = "true"
    return labels


@pytest.fixture
def agent_metrics() -> Iterator[str]:
    """The agent's own ``/metrics`` server (specon_agent.health.serve) on its registry, with a
    node series and one job's series as the control loop publishes them."""
    metrics = AgentMetrics()
    metrics.node_cpus.set(8)
    metrics.job_category.labels(*JOB, "PC").set(1)
    metrics.job_flowcon.labels(*JOB, "NL").set(1)
    metrics.job_loss.labels(*JOB).set(0.42)
    metrics.job_growth.labels(*JOB).set(0.05)
    metrics.job_efficiency.labels(*JOB).set(0.02)
    metrics.job_limit.labels(*JOB).set(2.0)
    metrics.job_cpu.labels(*JOB).set(1.5)
    server = serve(metrics.registry, LoopWatchdog(60), 0, "127.0.0.1")
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def _fill(expr: str, values: dict[str, str]) -> str:
    for var, value in values.items():
        expr = expr.replace(var, value)
    return expr


def _series(prom: str, expr: str) -> list[dict[str, str]]:
    doc = json.loads(_get(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    assert doc["status"] == "success", doc
    return [r["metric"] for r in doc["data"]["result"]]


@pytest.mark.plane  # the chart rendered by the plane's helm
def test_job_labels_survive_the_operators_relabelling(
        plane_bin: Path, tmp_path: Path, agent_metrics: str) -> None:
    objs = docs(render(plane_bin, tmp_path, {"metrics.serviceMonitor.enabled": True}))
    monitor = one(objs, "ServiceMonitor", "specon-agent")
    service = one(objs, "Service", "specon-agent-metrics")
    assert not monitor["spec"]["endpoints"][0].get("honorLabels")  # the relabelling alone
    bare = json.loads(json.dumps(monitor))  # the chart's monitor before
    bare["spec"]["endpoints"][0].pop("metricRelabelings")
    variants = {"chart": operator_scrape_config(monitor, 0),
                "bare": operator_scrape_config(bare, 0)}
    jobs = []
    for name, job in variants.items():
        # One Prometheus, two jobs on the same target: a `variant` label keeps them apart.
        target = {**discovered(service, agent_metrics), "variant": name}
        jobs.append({**job, "job_name": f"{job['job_name']}/{name}", "scrape_interval": "1s",
                     "static_configs": [{"targets": [target.pop("__address__")],
                                         "labels": target}]})
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(json.dumps({"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}))
    port = free_port()
    with (tmp_path / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            [_binary("prometheus"), f"--config.file={cfg}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    prom = f"http://127.0.0.1:{port}"
    try:
        _wait("prometheus ready", lambda: "Ready" in _get(f"{prom}/-/ready"), proc=proc)
        _wait("both jobs scraped", lambda: len(_series(prom, "specon_agent_job_loss")) == 2,
              proc=proc)
        job, = _series(prom, 'specon_agent_job_loss{variant="chart"}')
        assert (job["namespace"], job["pod"], job["container"]) == JOB, job
        assert not [k for k in job if k.startswith("exported_")], job
        assert (job["node"], job["job"]) == (NODE, "specon-agent-metrics"), job
        # A node series keeps the agent's pod: the Operator's target labels.
        node, = _series(prom, 'specon_agent_node_cpus{variant="chart"}')
        assert (node["namespace"], node["pod"], node["node"]) == (NS, AGENT_POD, NODE), node
        # The job dashboard's variables list the job's namespace and pod, and each of its
        # panels on a job series selects that job's (of the relabelled scrape job).
        board = json.loads((CHART / "dashboards" / "job.json").read_text())
        variables = {v["name"]: v["query"]["query"] for v in board["templating"]["list"]
                     if v["type"] == "query"}
        fill = {"$namespace": JOB[0], "$job": JOB[1]}
        for name, query in variables.items():
            selector = _fill(query.split("(", 1)[1].rsplit(",", 1)[0], fill)
            label = query.rsplit(",", 1)[1].strip(" )")
            got = {s.get(label) for s in _series(prom, selector) if s["variant"] == "chart"}
            assert JOB[0 if name == "namespace" else 1] in got, (name, got)
        for expr in exprs_of(board):
            if "$job" in expr:
                got = _series(prom, _fill(expr, fill))
                assert got, expr
                assert {s.get("variant", "chart") for s in got} == {"chart"}, (expr, got)
        # Without them, the agent's pod stands where the job's should.
        job, = _series(prom, 'specon_agent_job_loss{variant="bare"}')
        assert (job["namespace"], job["pod"]) == (NS, AGENT_POD), job
        assert (job["exported_namespace"], job["exported_pod"]) == JOB[:2], job
    finally:
        proc.terminate()
        proc.wait(20)
