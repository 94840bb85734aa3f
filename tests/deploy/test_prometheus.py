"""Observation on real parts: a real manager (heartbeats and extender calls) and a real agent
(standalone, following a training container on the real Docker Engine) scraped by a real
Prometheus (Debian's package, hack/test.d/40-prometheus.sh) on loopback. The main series return
data, every dashboard query evaluates, and every metric a dashboard names is one the running
services export."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from deploylib import CHART
from dockerlib import SESSION_LABEL
from planelib import free_port
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DASHBOARDS = sorted((CHART / "dashboards").glob("*.json"))
LABEL = {"org.specon.test.kind": "prometheus", **SESSION_LABEL, "specon.io/training": "true"}
TOKEN = "prometheus-test-token-0123456789"
NODE = "prom-node"
#: A training job in miniature: a loss that falls, printed in a format the agent reads.
TRAINER = ("import time\nw = 4.0\nfor step in range(1, 100000):\n"
           "    w *= 0.995\n    print(f'step={step} loss={w * w + 0.01:.6f}', flush=True)\n"
           "    time.sleep(0.2)\n")


def exprs_of(dashboard: dict[str, Any]) -> list[str]:
    out = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        q = var.get("query")
        if isinstance(q, dict) and "label_values(" in q.get("query", ""):
            out.append(q["query"].split("(", 1)[1].split(",")[0].strip())
    return out


_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and",
                 "or", "unless", "offset", "le", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    s = re.sub(r'"[^"]*"', '""', expr)  # strings (label values, templates)
    s = re.sub(r"\{[^}]*\}", "", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", "", s)  # ranges
    s = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", s)  # grouping labels
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        word = m.group(0)
        rest = s[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in _PROMQL_WORDS:
            continue  # a function or keyword
        names.add(word)
    return names


def exported_names(text: str) -> set[str]:
    """Every series name the exposition declares, with or without samples yet, but for the
    deprecated old names (dashboards and alert rules use the current ones)."""
    out: set[str] = set()
    for fam in text_string_to_metric_families(text):
        if fam.documentation.startswith("deprecated:"):
            continue
        suffixes = {"counter": ("_total", "_created"),
                    "histogram": ("_bucket", "_sum", "_count", "_created"),
                    "summary": ("_sum", "_count", "_created")}.get(fam.type, ("",))
        out.update(fam.name + s for s in suffixes)
        out.update(s.name for s in fam.samples)
    return out


def test_metric_name_parser_sees_through_functions_and_matchers() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, verb) (rate(specon_x_bucket{verb="filter"}'
            '[$__rate_interval]))) / on (node) group_left max(specon_y) * 60')
    assert metric_names(expr) == {"specon_x_bucket", "specon_y"}


# -- the running services -----------------------------------------------------------------------
@dataclass
class Services:
    manager: str
    agent: str
    workdir: Path


def _get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


def _post(url: str, body: Any, token: str | None = None) -> int:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return int(resp.status)


def _wait(what: str, probe: Any, timeout: float = 60, proc: Any = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited with {proc.returncode}")
        try:
            got = probe()
        except OSError:
            got = None
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def _script(name: str) -> str:
    return shutil.which(name) or str(Path(sys.executable).parent / name)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    import docker

    if os.environ.get("SPECON_SKIP_DOCKER") == "1":
        pytest.skip("SPECON_SKIP_DOCKER=1")
    base = os.environ.get("SPECON_BASE_IMAGE") or (
        "specon-base:" + (CHART.parents[1] / "hack/images/base-tag").read_text().strip())
    engine = docker.from_env()
    work = tmp_path_factory.mktemp("observe")
    procs: list[subprocess.Popen[bytes]] = []
    job = engine.containers.run(base, ["python3", "-u", "-c", TRAINER], detach=True,
                                labels=LABEL, network_mode="none", name=f"prom-job-{os.getpid()}",
                                nano_cpus=1_000_000_000)
    try:
        tokens = work / "tokens"
        tokens.write_text(f"{TOKEN} {NODE}\n")
        mport, aport = free_port(), free_port()
        menv = {**os.environ, "SPECON_MANAGER_HOST": "127.0.0.1",
                "SPECON_MANAGER_PORT": str(mport), "SPECON_MANAGER_KUBERNETES": "false",
                "SPECON_MANAGER_TOKENS_FILE": str(tokens)}
        procs.append(subprocess.Popen([_script("specon-manager")], env=menv,
                                      stdout=(work / "manager.log").open("wb"),
                                      stderr=subprocess.STDOUT))
        aenv = {**os.environ, "SPECON_AGENT_MODE": "standalone", "SPECON_AGENT_ACTUATOR": "docker",
                "SPECON_AGENT_NODE_NAME": NODE, "SPECON_AGENT_METRICS_PORT": str(aport),
                "SPECON_AGENT_METRICS_ADDRESS": "127.0.0.1", "SPECON_AGENT_INTERVAL_S": "3",
                "SPECON_AGENT_POLL_S": "0.5"}
        procs.append(subprocess.Popen([_script("specon-agent")], env=aenv,
                                      stdout=(work / "agent.log").open("wb"),
                                      stderr=subprocess.STDOUT))
        manager, agent = f"http://127.0.0.1:{mport}", f"http://127.0.0.1:{aport}"
        _wait("manager /healthz", lambda: _get(f"{manager}/healthz") == "ok", proc=procs[0])
        _wait("the agent follows the job",
              lambda: "specon_agent_job_loss{" in _get(f"{agent}/metrics"), proc=procs[1])
        # What a worker and kube-scheduler send: a heartbeat with the job, extender calls.
        hb = {"node": NODE, "time": time.time(), "seq": 1, "capacity_cpus": 4.0,
              "load_cores": 1.0, "jobs": [{"namespace": "docker", "pod": job.name,
                                           "category": "PC", "loss": 1.0}]}
        assert _post(f"{manager}/v1/heartbeat", hb, TOKEN) == 200
        args = {"Pod": {"metadata": {"name": "p", "namespace": "default",
                                     "labels": {"specon.io/training": "true"}}, "spec": {}},
                "NodeNames": [NODE, "other"]}
        for verb in ("filter", "prioritize"):
            assert _post(f"{manager}/{verb}", args) == 200
        yield Services(manager, agent, work)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        job.remove(force=True)
        engine.close()


@pytest.mark.parametrize("board", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboards_name_only_metrics_the_services_export(services: Services, board: Path) -> None:
    exported = exported_names(_get(f"{services.manager}/metrics")) | exported_names(
        _get(f"{services.agent}/metrics"))
    dashboard = json.loads(board.read_text())
    exprs = exprs_of(dashboard)
    assert exprs
    for expr in exprs:
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= exported, f"{board.name}: {sorted(names - exported)} not exported ({expr})"


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    doc = json.loads(_get(url))
    assert doc["status"] == "success", (expr, doc)
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def test_prometheus_scrapes_manager_and_agent(services: Services) -> None:
    binary = os.environ.get("SPECON_PROMETHEUS") or shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI") == "true" or os.environ.get("SPECON_SKIP_PROMETHEUS") != "1":
            pytest.fail("no prometheus binary: hack/test.d/40-prometheus.sh installs Debian's")
        pytest.skip("SPECON_SKIP_PROMETHEUS=1")
    port = free_port()
    cfg = services.workdir / "prometheus.yml"
    cfg.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "specon-manager", "static_configs": [
                {"targets": [services.manager.split("//")[1]]}]},
            # The worker's name as the node label, as the chart's ServiceMonitor relabels it.
            {"job_name": "specon-agent", "static_configs": [
                {"targets": [services.agent.split("//")[1]], "labels": {"node": NODE}}]},
        ]}))
    log = (services.workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={cfg}", f"--storage.tsdb.path={services.workdir / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT)
    prom = f"http://127.0.0.1:{port}"
    try:
        _wait("prometheus ready", lambda: "Ready" in _get(f"{prom}/-/ready"), proc=proc)
        _wait("both targets up", lambda: len(_query(prom, "up == 1")) == 2, timeout=30, proc=proc)
        # The main series, as the dashboards query them.
        assert _query(prom, 'specon_manager_heartbeats_total{result="accepted"} >= 1')
        assert _query(prom, 'sum by (category) (specon_manager_jobs{category="PC"}) == 1')
        for verb in ("filter", "prioritize"):
            assert _query(prom, "specon_manager_extender_request_duration_seconds_count"
                                f'{{verb="{verb}"}} >= 1')
        assert _query(prom, f'specon_agent_node_cpus{{node="{NODE}"}} > 0')
        losses = _wait("a loss series", lambda: _query(prom, "specon_agent_job_loss"),
                       timeout=30, proc=proc)
        # The agent names a job by namespace and pod; Prometheus's own `job` stays the scrape
        # job (nothing gets renamed to exported_job).
        assert losses[0]["metric"]["job"] == "specon-agent"
        assert "pod" in losses[0]["metric"] and "exported_job" not in losses[0]["metric"]
        assert _wait("jobs per category on the worker", lambda: _query(
            prom, "sum by (node, category) (specon_agent_jobs) > 0"), timeout=30)
        # Every dashboard query evaluates (with Grafana's variables filled in).
        job, ns = losses[0]["metric"]["pod"], losses[0]["metric"]["namespace"]
        for board in DASHBOARDS:
            for expr in exprs_of(json.loads(board.read_text())):
                _query(prom, expr.replace("$__rate_interval", "15s").replace("$job", job)
                       .replace("$namespace", ns))
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


_UNITS = ("_seconds", "_bytes", "_cores", "_cpus", "_per_second", "_per_core_second", "_ratio")


def _families(services: Services) -> list[Any]:
    return [*text_string_to_metric_families(_get(f"{services.manager}/metrics")),
            *text_string_to_metric_families(_get(f"{services.agent}/metrics"))]


def test_metric_names_follow_prometheus_conventions(services: Services) -> None:
    for fam in _families(services):
        assert fam.name.startswith("specon_"), fam.name
        if not fam.documentation.startswith("deprecated:"):  # old names, until the next release
            assert fam.name.startswith(("specon_agent_", "specon_manager_")), fam.name
            assert "_minute" not in fam.name, f"{fam.name}: not in a base unit"
        if fam.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in fam.samples), fam.name
        if fam.type == "histogram":
            assert fam.name.endswith(_UNITS), f"{fam.name}: no unit in the name"
        for s in fam.samples:
            # No per-iteration or free-form label: only these bounded ones exist.
            assert set(s.labels) <= {"verb", "result", "decision", "state", "category", "reason",
                                     "outcome", "le", "list", "direction", "kind",
                                     "phase", "event", "namespace", "pod", "container"}, (
                s.name, s.labels)


def test_no_metric_uses_a_label_prometheus_reserves(services: Services) -> None:
    for fam in _families(services):
        for s in fam.samples:
            assert not {"job", "instance"} & set(s.labels), (s.name, s.labels)
