"""The agent's settings: one pydantic-settings object, from flags, environment and a YAML file.

Precedence: command-line flags, then ``SPECON_AGENT_*`` environment variables, then the file
named by ``--config`` (or ``SPECON_AGENT_CONFIG``), then the defaults below. docs/agent.md lists
every setting.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    CliSettingsSource,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    YamlConfigSettingsSource,
)

from specon import defaults
from specon.core.policy import canonical
from specon.wire import LABEL_TRAINING

SA_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class SettingsProblem(Exception):
    """The settings cannot be used: the message is one line saying which and why."""


class _ConfigFile(YamlConfigSettingsSource):
    """pydantic-settings' YAML source for the file named by ``--config`` (below flags and
    environment), which may also use the flags' kebab-case names; a file that is not YAML or
    not a mapping is a :class:`SettingsProblem` naming it."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        try:
            doc = super()._read_file(file_path)
        except yaml.YAMLError as exc:
            raise SettingsProblem(
                f"config file {file_path}: not YAML ({exc.__class__.__name__})") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsProblem(f"config file {file_path}: {_why(exc)}") from None
        if not isinstance(doc, dict):
            raise SettingsProblem(f"config file {file_path}: must be a mapping of settings")
        return {str(k).replace("-", "_"): v for k, v in doc.items()}


def _why(exc: Exception) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else
            exc.__class__.__name__)


class AgentSettings(BaseSettings):
    """Every setting of ``specon-agent`` (flag ``--kebab-name``, env ``SPECON_AGENT_NAME``)."""

    model_config = SettingsConfigDict(
        env_prefix="SPECON_AGENT_",
        extra="forbid",
        cli_prog_name="specon-agent",
        cli_kebab_case=True,
        cli_implicit_flags=True,
    )
    #: The config file :func:`load_settings` read for the object being built (None: none).
    _config_file: ClassVar[_ConfigFile | None] = None

    config: Path | None = Field(None, description="YAML file with settings (below flags and env)")
    mode: Literal["standalone", "cluster"] = Field(
        "standalone",
        description="standalone: one Docker host, FlowCon alone; cluster: pods of this node, "
        "reports to the manager",
    )
    enforcement: Literal["enforce", "observe"] = Field(
        "enforce",
        description="enforce: write the CPU limits decided; observe: decide them as when "
        "enforcing, write none, and tell each as a WouldLimitCPU Event and the "
        "specon_agent_job_would_cpu_limit_cores gauge (docs/agent.md, \"Observe mode\")",
    )
    node_name: str = Field(
        default_factory=lambda: os.environ.get("NODE_NAME") or socket.gethostname(),
        min_length=1, description="this node's name (default: $NODE_NAME or the host name)")
    actuator: str = Field("docker", description="how limits are written: docker, cgroup, resize")
    node_cpus: float | None = Field(
        None, gt=0, description="CPUs of the node (default: the smaller of the CPUs seen and, "
        "in cluster mode, the Node's allocatable CPUs)")
    cgroup_root: Path | None = Field(
        None, description="root of the cpu cgroup hierarchy (default: from /proc/self/mountinfo)")
    cpu_period_us: int = Field(100_000, ge=1_000, le=1_000_000, description="CFS period")
    min_step: float = Field(
        0.05, ge=0, lt=1, description="skip limit writes smaller than this fraction")
    events: bool = Field(
        True, description="post a Kubernetes Event on the pod for each CPU limit change "
        "(cluster mode only; docs/agent.md, \"Events\")")
    events_window_s: float = Field(
        60.0, gt=0, le=3600, description="at most one limit Event per pod in this many "
        "seconds; the changes in between are merged into the next one")
    restore_on_exit: bool = Field(True, description="put back the original limits on shutdown")
    originals_file: Path | None = Field(
        None, description="file on the node keeping each container's limit from before the "
        "agent's first change, so that a restarted agent restores it (default: memory only)")

    label: str = Field(
        LABEL_TRAINING,
        description="label (or annotation) that opts a container or pod in, value 'true'")
    scheduler_name: str = Field(
        "specon", description="pods with this spec.schedulerName are training jobs too "
        "(cluster mode; the chart's scheduler is specon-scheduler; empty: by label only)")
    docker_host: str | None = Field(None, description="Docker Engine URL (default: DOCKER_HOST)")
    kubeconfig: Path | None = Field(None, description="kubeconfig (cluster mode; default: "
                                    "in-cluster service account)")
    pod_log_root: Path = Field(Path("/var/log/pods"), description="the kubelet's pod log folder")
    progress_root: Path | None = Field(
        None, description="where the agent sees the shared volume that holds progress files "
        "(cluster mode; a pod's annotation specon.io/progress-file is relative to its "
        "namespace's folder of it, <root>/<namespace>/)")

    # The shipped parameters (specon/defaults.py); in cluster mode the manager's replace them.
    alpha: float = Field(defaults.ALPHA, gt=0,
                         description="SpeCon threshold (normalised progress per minute)")
    interval_s: float = Field(defaults.INTERVAL_S, gt=0,
                              description="categorisation interval (s)")
    flowcon_alpha: float | None = Field(
        defaults.FLOWCON_ALPHA, gt=0, description="FlowCon threshold per core")
    flowcon_beta: float = Field(defaults.FLOWCON_BETA, ge=1,
                                description="FlowCon floor factor: no limit below 1/(beta*n)")
    flowcon_interval_s: float | None = Field(
        None, gt=0, description="FlowCon base interval (default: interval_s)")
    flowcon_max_interval_s: float = Field(defaults.FLOWCON_MAX_INTERVAL_S, gt=0,
                                          description="FlowCon back-off cap (s)")
    policy: str = Field(
        defaults.POLICY, description="scheduling policy whose node rules the agent runs "
        "(specon.core.policy): 'progress' (the default: CPU by work left, the progress-aware "
        "policy) or 'paper' (FlowCon and Algorithm 3's requests, the research's); the chart "
        "sets the manager's policy here; an old name ('specon+flowcon') is read as its new "
        "one, with a warning, until the next release")
    poll_s: float = Field(2.0, gt=0, le=60, description="how often logs are read (s)")
    tail_bytes: int = Field(
        1 << 20, ge=4096, description="at most this much of an existing log is read on discovery")

    qos_interval_s: float = Field(
        15.0, gt=0, le=3600, description="how often targets and deadlines are judged (s)")
    qos_window_s: float = Field(
        30.0, gt=0, le=3600, description="window over which a job's step rate is measured (s)")
    qos_floor_cores: float = Field(
        defaults.QOS_FLOOR_CORES, gt=0, description="the lowest CPU limit (cores) of a job "
        "that yields to one that would miss its deadline")
    qos_over_shares: bool = Field(
        False, description="lay the QoS limits over a node share rule's (the progress "
        "policy's) too: deadlines first, more of them met, but a job of an overloaded node may "
        "fall four times behind its default completion (docs/qos.md); off: the share rule "
        "decides the CPU, targets and deadlines are judged, reported and hold moves")

    manager_url: str | None = Field(None, description="manager base URL (cluster mode)")
    token_file: Path | None = Field(
        None, description="bearer token file (default: the pod's service-account token)")
    manager_ca_file: Path | None = Field(
        None, description="CA certificate that an https manager_url is verified against "
        "(default: the system's CAs)")
    heartbeat_s: float = Field(10.0, gt=0, description="heartbeat interval (s)")
    http_timeout_s: float = Field(5.0, gt=0, le=120, description="timeout of one manager call")
    backoff_max_s: float = Field(60.0, gt=0, description="longest wait between retries (s)")

    metrics_port: int = Field(9108, ge=0, le=65535,
                              description="/metrics and /healthz port (0: off)")
    metrics_address: str = Field("0.0.0.0", description="address /metrics listens on")
    loop_stall_s: float | None = Field(
        None, gt=0, description="/healthz answers 503 once the control loop has not completed "
        "a pass for this long (s; default: 3 x poll_s, at least 30)")
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        file = () if cls._config_file is None else (cls._config_file,)
        return (init_settings, env_settings, *file)

    @field_validator("policy")
    @classmethod
    def _policy_name(cls, v: str) -> str:
        return canonical(v)  # an old name: its new one, with a warning

    @model_validator(mode="after")
    def _policy_runs_here(self) -> AgentSettings:
        from .loop_config import agent_policy

        agent_policy(self.policy)  # ValueError names what is missing
        return self

    @model_validator(mode="after")
    def _consistent(self) -> AgentSettings:
        if self.mode == "cluster" and not self.manager_url:
            raise ValueError("cluster mode needs manager_url (--manager-url)")
        return self

    @property
    def bearer_token_file(self) -> Path | None:
        if self.token_file is not None:
            return self.token_file
        return SA_TOKEN if SA_TOKEN.exists() else None


def load_settings(argv: Sequence[str]) -> AgentSettings:
    """Settings from ``argv``, the environment and the config file; :class:`SettingsProblem`
    (one line) when they cannot be used. ``--help`` prints and raises SystemExit(0)."""
    try:
        cli: CliSettingsSource[AgentSettings] = CliSettingsSource(
            AgentSettings, cli_parse_args=list(argv), cli_exit_on_error=False)
        parsed = cli(args=list(argv))
        given = {**EnvSettingsSource(AgentSettings)(), **parsed()}  # flags over environment
    except SettingsError as exc:
        raise SettingsProblem(str(exc).splitlines()[0]) from None
    path = Path(given["config"]) if given.get("config") else None
    file = None
    if path is not None:
        try:
            path.open("rb").close()  # the YAML source would skip a missing file silently
        except OSError as exc:
            raise SettingsProblem(f"config file {path}: {_why(exc)}") from None
        file = _ConfigFile(AgentSettings, yaml_file=path)
    AgentSettings._config_file = file
    try:
        return AgentSettings(_cli_settings_source=parsed)  # type: ignore[call-arg]
    except SettingsError as exc:
        raise SettingsProblem(str(exc).splitlines()[0]) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        where = ".".join(str(p) for p in first["loc"]) or "settings"
        if file is not None and field in file.yaml_data and field not in given:
            where = f"config file {path}: {where}"  # the file set it: neither flag nor env
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise SettingsProblem(f"{where}: {first['msg']}{more}") from None
    finally:
        AgentSettings._config_file = None
