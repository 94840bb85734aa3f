"""`specon-agent`: builds the agent from its settings and runs it until SIGTERM or SIGINT.

Exit status: 0 after a clean stop (limits restored) and for ``--help`` and ``--version``; 2 for
unusable settings or flags (one line on stderr); 1 when a part the agent needs is missing at
start (the engine, the cgroup hierarchy, the Kubernetes API), also in one line.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import ssl
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specon.quantity import parse_cpu
from specon.version import version

from .actuators import Actuator, ActuatorError, create
from .actuators.ledger import Ledger
from .actuators.observe import ObserveActuator
from .agent import Agent
from .cpu import CpuMeter
from .discovery import DockerDiscovery, KubeDiscovery
from .events import LimitEvents, kube_sender
from .health import serve
from .link import ManagerLink
from .loop_config import LoopConfig
from .metrics import AgentMetrics
from .settings import AgentSettings, SettingsProblem, load_settings

log = logging.getLogger("specon_agent")


class StartupError(Exception):
    """A part the agent needs is missing; the message says which and what to do."""


def _docker_client(settings: AgentSettings) -> Any:
    import docker

    try:
        client = docker.DockerClient(base_url=settings.docker_host) if settings.docker_host \
            else docker.from_env()
        client.ping()
    except Exception as exc:
        raise StartupError(f"no Docker Engine answers ({exc}); set --docker-host") from None
    return client


def node_allocatable_cpus(core: Any, node_name: str) -> float | None:
    """The CPUs the node offers its pods (its ``status.allocatable.cpu``): what a limit may
    reach there. ``os.cpu_count()`` counts the host's CPUs, more than a node whose kubelet
    reserves some (or a node capped below its host) lets pods use; a limit above the pods'
    parent quota is refused by the kernel. None when it cannot be read (no RBAC to get the
    node, the API server away): the caller falls back to the CPUs it sees."""
    try:
        node = core.read_node(node_name)
        raw = (node.status.allocatable or {}).get("cpu") if node.status else None
        cpus = parse_cpu(raw) if raw is not None else None
    except Exception as exc:  # an RBAC refusal, a bad quantity, the API server away
        log.warning("node %s: its allocatable CPUs could not be read (%s); using the CPUs "
                    "this agent sees", node_name, exc)
        return None
    return cpus if cpus is not None and cpus > 0 else None


def _actuator(settings: AgentSettings, client: Any) -> Actuator:
    options: dict[str, Any] = {"node_cpus": settings.node_cpus,
                               "period_us": settings.cpu_period_us,
                               "min_step": settings.min_step}
    if settings.actuator == "docker":
        options["client"] = client
    elif settings.actuator == "cgroup":
        options["root"] = settings.cgroup_root
    elif settings.actuator == "resize":
        options.update(_api_endpoint(settings))
    try:
        return create(settings.actuator, **options)
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    except ActuatorError as exc:
        raise StartupError(f"actuator {settings.actuator}: {exc}") from None


def _kube_config(settings: AgentSettings) -> Any:
    """The Kubernetes client's configuration: from --kubeconfig, else in-cluster."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        if settings.kubeconfig is not None:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(settings.kubeconfig), client_configuration=cfg)
        else:
            config.load_incluster_config(cfg)  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise StartupError(f"no Kubernetes API configuration ({exc}); set --kubeconfig") \
            from None
    return cfg


def _bearer(cfg: Any) -> str | None:
    """The configuration's bearer token now. Asking through ``get_api_key_with_prefix`` runs the
    package's refresh hook: in-cluster it reads the projected token file again once a minute
    (the kubelet rotates it), from a kubeconfig it re-runs an ``exec`` plugin whose token is
    about to expire."""
    # The key's name depends on the client's version ("authorization", later "BearerToken").
    names = [k for k in (cfg.api_key or {}) if k.lower() in ("bearertoken", "authorization")]
    auth = str(cfg.get_api_key_with_prefix(names[0]) or "") if names else ""
    # The in-cluster loader writes "bearer <token>", a kubeconfig "Bearer <token>".
    scheme, _, rest = auth.partition(" ")
    return (rest if scheme.lower() == "bearer" else auth).strip() or None


def _api_endpoint(settings: AgentSettings) -> dict[str, Any]:
    """The API server, bearer token (a function: asked before each request) and CA the resize
    actuator talks to."""
    cfg = _kube_config(settings)
    if _bearer(cfg) is None:
        raise StartupError("actuator resize needs a bearer token (the pod's service account, "
                           "or a token or exec user in --kubeconfig)")
    return {"server": cfg.host, "token": lambda: _bearer(cfg), "ca_file": cfg.ssl_ca_cert}


def _kube_api(settings: AgentSettings) -> Any:
    from kubernetes import client, config

    try:
        if settings.kubeconfig is not None:
            api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=str(settings.kubeconfig))
        else:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            api_client = client.ApiClient()
    except Exception as exc:
        raise StartupError(f"no Kubernetes API configuration ({exc}); set --kubeconfig") \
            from None
    return client.CoreV1Api(api_client)


#: The one name the chart gave the file before it named the node in it.
LEGACY_ORIGINALS = "originals.json"


def adopt_legacy(path: Path) -> None:
    """Take over the file an earlier release kept under one name for every node (``path``
    names the node now, so that two agents sharing a host folder never share records)."""
    legacy = path.with_name(LEGACY_ORIGINALS)
    if path.name == legacy.name or path.exists() or not legacy.is_file():
        return
    try:
        os.replace(legacy, path)
        log.info("took over %s (an earlier release's name) as %s", legacy.name, path.name)
    except OSError as exc:
        log.warning("could not take over %s as %s: %s", legacy, path.name, exc)


def _restore_recorded(actuator: Actuator, path: Path, metrics: AgentMetrics) -> None:
    """Keep the originals in ``path`` and first put back every limit an earlier run of the
    agent recorded there (it was killed before it could): the agent then starts from the
    owners' limits, never from its own (docs/agent.md, "Limits that survive the agent")."""
    adopt_legacy(path)
    ledger = Ledger.open(path)
    actuator.attach_ledger(ledger)
    recorded = len(ledger.entries)
    if recorded or ledger.lifted:  # a pod lifted alone (killed between writes) goes back too
        failed = actuator.restore_all()
        metrics.restore_failures.inc(len(failed))
        for cid, exc in failed.items():
            log.warning("could not restore the recorded limit of %s: %s", cid[:12], exc)
        log.info("restored %d of %d limits an earlier run recorded in %s", recorded - len(failed),
                 recorded, path)


def build(settings: AgentSettings, metrics: AgentMetrics | None = None) -> tuple[Agent, Any]:
    """The agent and its discovery, as the settings say (nothing started yet)."""
    metrics = metrics or AgentMetrics()
    needs_docker = settings.mode == "standalone" or settings.actuator == "docker"
    client = _docker_client(settings) if needs_docker else None
    core = _kube_api(settings) if settings.mode != "standalone" else None
    if core is not None and settings.node_cpus is None:
        allocatable = node_allocatable_cpus(core, settings.node_name)
        if allocatable is not None:
            seen = float(os.cpu_count() or 1)
            settings = settings.model_copy(update={"node_cpus": min(seen, allocatable)})
    actuator = _actuator(settings, client)
    if settings.originals_file is not None:
        _restore_recorded(actuator, settings.originals_file, metrics)
    if settings.enforcement == "observe":
        # After the restore: limits an earlier, enforcing run left go back to their owners'.
        actuator = ObserveActuator(actuator)
    meter = CpuMeter(settings.cgroup_root, client)

    def count(reason: str) -> None:
        metrics.discovery_errors.labels(reason).inc()

    discovery: DockerDiscovery | KubeDiscovery
    events = None
    if settings.mode == "standalone":  # no Kubernetes: no Events
        discovery = DockerDiscovery(client, settings.label, on_error=count)
    else:
        assert core is not None
        discovery = KubeDiscovery(core, settings.node_name, settings.label,
                                  settings.pod_log_root, settings.progress_root, on_error=count,
                                  scheduler_name=settings.scheduler_name)
        if settings.events:
            events = LimitEvents(kube_sender(core.api_client), settings.node_name,
                                 window_s=settings.events_window_s,
                                 count=lambda outcome: metrics.limit_events.labels(outcome).inc())
    link = None
    if settings.manager_ca_file is not None:
        try:
            ssl.create_default_context(cafile=str(settings.manager_ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise StartupError(f"manager_ca_file {settings.manager_ca_file}: not a readable "
                               f"CA certificate ({exc})") from None
    if settings.manager_url:
        link = ManagerLink(settings.manager_url, settings.bearer_token_file,
                           interval_s=settings.heartbeat_s, timeout_s=settings.http_timeout_s,
                           backoff_max_s=settings.backoff_max_s,
                           ca_file=settings.manager_ca_file)
    config = LoopConfig(
        node=settings.node_name, alpha=settings.alpha, interval_s=settings.interval_s,
        flowcon_alpha=settings.flowcon_alpha, flowcon_beta=settings.flowcon_beta,
        flowcon_interval_s=settings.flowcon_interval_s,
        flowcon_max_interval_s=settings.flowcon_max_interval_s, poll_s=settings.poll_s,
        tail_bytes=settings.tail_bytes, restore_on_exit=settings.restore_on_exit,
        qos_interval_s=settings.qos_interval_s, qos_window_s=settings.qos_window_s,
        qos_floor_cores=settings.qos_floor_cores, qos_over_shares=settings.qos_over_shares,
        policy=settings.policy,
        stall_s=settings.loop_stall_s)
    agent = Agent(config, actuator, meter, link=link, metrics=metrics, limit_events=events)
    set_cpu_speed(agent, agent.speed_probe.probe())
    if agent.cpu_speed is not None:
        log.info("node %s: per-core speed %.3g as measured (specon.io/cpu-speed, where "
                 "labelled, is used instead)", settings.node_name, agent.cpu_speed)
    log.info("specon-agent %s mode on node %s: policy %s, %s, actuator %s (%.3g CPUs), CPU "
             "use from %s, manager %s", settings.mode, settings.node_name, settings.policy,
             "observing (no limit is written)" if actuator.observing else "enforcing",
             actuator.name, actuator.node_cpus, meter.source, settings.manager_url or "none")
    return agent, discovery


def set_cpu_speed(agent: Agent, speed: float | None) -> None:
    """The node's measured per-core speed into the agent's heartbeats and metrics."""
    agent.cpu_speed = speed
    if speed is not None:
        agent.metrics.node_cpu_speed.set(speed)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:
        print(f"specon-agent {version()}")
        return 0
    try:
        settings = load_settings(args)
    except SettingsProblem as exc:
        print(f"specon-agent: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.log_level != "debug":
        # One line per heartbeat would drown the agent's own log; failures are logged by it.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        agent, discovery = build(settings)
    except StartupError as exc:
        print(f"specon-agent: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # `kill -USR1` prints every thread's stack: what an operator needs for a stuck agent.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if settings.metrics_port:  # /metrics, and /healthz for the livenessProbe
        serve(agent.metrics.registry, agent.watchdog, settings.metrics_port,
              settings.metrics_address)
    discovery.start(agent.events)
    if agent.link is not None:
        agent.link.start()
    threading.Thread(target=agent.speed_probe.run, name="speed-probe", daemon=True,
                     args=(stop, lambda speed: set_cpu_speed(agent, speed))).start()
    try:
        agent.run(stop)
    finally:
        try:
            agent.close()  # limits back first, whatever stopping the threads then does
        finally:
            discovery.stop()
            if agent.link is not None:
                agent.link.stop()
            if agent.limit_events is not None:
                agent.limit_events.close()  # the restores' Events, for a few seconds at most
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
