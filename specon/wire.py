"""The wire protocol between node agents and the manager (pydantic models, version 1).

Every number is finite and bounded, and a malformed message is rejected with a message that
names the field. Limits are fractions of the node's CPUs (1.0 = the whole node); CPU use is
in cores.

Compatibility across a rolling upgrade (docs/upgrades.md): both sides ignore keys they do not
know, so a newer peer's added fields are no error; a message carries ``protocol`` and each
side accepts its own major version with any minor (``specon/v1``, ``specon/v1.N``). Within a
major version a field is only ever added, optional, with a default that means what the old
peer assumed; removing or renaming a field, changing its meaning or units, or adding a value
to an enumerated field needs a new major version. ``tests/wire`` runs the previous release's
samples against this code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from specon import names
from specon.core.categorize import Category
from specon.cpu_speed import MAX_SPEED, MIN_SPEED
from specon.kinds import KIND_PATTERN, MAX_KIND

#: What this release sends; it accepts ``specon/v1`` and ``specon/v1.<minor>``.
PROTOCOL = "specon/v1"
MAJOR = "specon/v1"
#: The manager's ``/status/whatif-input`` reply, as ``specon whatif`` reads it.
WHATIF_INPUT_FORMAT = "specon-whatif-input/v1"
MAX_JOBS_PER_HEARTBEAT = 1000
#: The largest sequence number (int64, what Go and Prometheus can hold).
MAX_SEQ = 2**63 - 1

#: Pod label that makes a pod a training job (as does ``spec.schedulerName: specon``).
LABEL_TRAINING = names.LABEL_TRAINING
#: Pod label by which a training pod opts in to migration (it honours docs/training-contract.md).
LABEL_MIGRATABLE = names.LABEL_MIGRATABLE

Finite = Annotated[float, Field(allow_inf_nan=False)]
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1, max_length=253)]
QosState = Literal["none", "on-track", "at-risk", "given-up", "reached"]
#: Every QosState, in order.
QOS_STATES: tuple[str, ...] = get_args(QosState)


def _same_major(version: str) -> str:
    major, dot, minor = version.partition(".")
    if major != MAJOR or (dot and not (minor.isdigit() and len(minor) <= 4)):
        raise ValueError(f"protocol {version[:32]!r} is not spoken here: this side speaks "
                         f"{MAJOR} and its minor versions ({MAJOR}.N); see docs/upgrades.md "
                         "for the order in which to upgrade the manager and the agents")
    return version


Protocol = Annotated[str, Field(max_length=32), AfterValidator(_same_major)]


class _Wire(BaseModel):
    # Unknown keys are ignored, not refused: a newer peer's added fields must not fail an older
    # one during a rolling upgrade (the module's docstring has the rules for changes).
    model_config = ConfigDict(extra="ignore", frozen=True)


class SavedCheckpoint(_Wire):
    """A job's last verified checkpoint, as its ``saved.json`` says (docs/training-contract.md)."""

    request: Annotated[str, Field(max_length=64)] | None = None  # the request it answered
    name: Annotated[str, Field(max_length=128)]
    step: Annotated[int, Field(ge=0)]
    sha256: Annotated[str, Field(min_length=64, max_length=64, pattern="^[0-9a-f]{64}$")]
    time: NonNeg


class JobReport(_Wire):
    """One training container as its node agent sees it."""

    namespace: Name
    pod: Name
    container: Name = "main"
    uid: Annotated[str, Field(max_length=64)] = ""  # pod UID: migrations are tracked by UID
    category: Category
    growth: NonNeg | None = None  # normalised progress per minute (docs/normalisation.md)
    efficiency: NonNeg | None = None  # growth per core
    loss: Finite | None = None
    step: Annotated[int, Field(ge=0)] | None = None
    #: Seconds of CPU work left, as the agent measures it (specon.core.job_loads.measured_load:
    #: steps left x CPU-seconds per step); None when unknown (no step measured yet).
    work_s: NonNeg | None = None
    #: Seconds of CPU work it has done (steps done x CPU-seconds per step): a progressing job
    #: is served as if it had at most EARLY_FACTOR times this left (specon.core.progress).
    #: None when unknown, and from agents older than this field.
    work_done_s: NonNeg | None = None
    #: The most cores the job showed it can use (a loop that sleeps or waits on I/O used less
    #: than its limit: specon.core.job_loads.demand_cap); None when not known (it may use the
    #: node), and from agents older than this field.
    demand_cores: Annotated[float, Field(gt=0, le=4096, allow_inf_nan=False)] | None = None
    limit: Fraction = 1.0
    cpu_cores: NonNeg = 0.0
    #: The CPU limit its owner set (cores) when the agent has changed it (None: unchanged, or
    #: no limit): a copy of the pod the manager makes for a migration gets the owner's limit,
    #: not the agent's.
    owner_limit_cores: NonNeg | None = None
    migrated: bool = False
    checkpointable: bool = False  # honours the training contract (can be moved)
    #: Quality target and deadline (docs/qos.md); None when the pod states none.
    target_loss: Finite | None = None
    deadline: NonNeg | None = None  # seconds since the epoch, agent clock
    target_reached: bool = False
    #: Where the job stands against them: none, on-track, at-risk (more CPU can still save
    #: it), given-up (cannot make it even with the whole node) or reached.
    qos: QosState = "none"
    #: Seconds from now, at the current rate; None when unknown (no fit yet, no step rate).
    predicted_finish_s: NonNeg | None = None
    predicted_target_s: NonNeg | None = None
    predicted_target_low_s: NonNeg | None = None  # the uncertainty band of the target time
    predicted_target_high_s: NonNeg | None = None
    #: Deadline minus the predicted time to it (negative: late at the current rate).
    slack_s: Finite | None = None
    #: The job's last verified checkpoint (None: none seen); answers a CheckpointRequest.
    checkpoint: SavedCheckpoint | None = None
    #: The steps the pod declares it runs in all (``specon.io/total-steps``); None: none
    #: declared, and from agents older than this field (``specon whatif`` estimates it).
    total_steps: Annotated[int, Field(gt=0, le=MAX_SEQ)] | None = None
    #: The pod's creation, seconds since the epoch (agent clock); None: not known.
    created: NonNeg | None = None
    #: Its pod is being deleted (``deletionTimestamp``): the job still runs and uses CPU, but
    #: will not run to completion (``specon whatif`` leaves it out). False from agents older
    #: than this field.
    ending: bool = False
    #: The job's kind (specon.kinds: its pod's ``specon.io/kind`` label, else its container's
    #: image): the manager takes a new pod of the same kind to be like it. None: not known,
    #: and from agents older than this field.
    kind: Annotated[str, Field(max_length=MAX_KIND, pattern=KIND_PATTERN)] | None = None


class Heartbeat(_Wire):
    protocol: Protocol = PROTOCOL
    node: Name
    time: NonNeg  # seconds since the epoch, agent clock when sent (the manager bounds its skew)
    seq: Annotated[int, Field(ge=0, le=MAX_SEQ)]
    #: The agent process that sent it (new at every start): the manager orders a node's
    #: heartbeats by (boot, seq), so a restarted agent is heard at once. None (an agent of the
    #: previous release): ordered by seq and time as then.
    boot: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    capacity_cpus: Annotated[float, Field(gt=0, le=100_000, allow_inf_nan=False)]
    load_cores: NonNeg
    jobs: Annotated[list[JobReport], Field(max_length=MAX_JOBS_PER_HEARTBEAT)] = []
    actuator: Annotated[str, Field(max_length=32)] = ""
    #: The node's per-core speed as its agent measured it (specon_agent.speed_probe), on the
    #: probe's scale; the manager uses it where the node has no ``specon.io/cpu-speed`` label.
    #: None: not measured, and from agents older than this field.
    cpu_speed: Annotated[float, Field(ge=MIN_SPEED, le=MAX_SPEED, allow_inf_nan=False)] | None \
        = None


class ReallocationRequest(_Wire):
    """A node asks the manager to move a converged job (Algorithm 3's immediate request)."""

    protocol: Protocol = PROTOCOL
    node: Name
    namespace: Name
    pod: Name
    uid: Annotated[str, Field(max_length=64)] = ""
    time: NonNeg
    reason: Annotated[str, Field(max_length=256)] = "converged"


class Parameters(_Wire):
    """What the manager tells agents in every heartbeat reply (one source of truth)."""

    alpha: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    interval_s: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    flowcon_alpha: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    flowcon_beta: Annotated[float, Field(ge=1, allow_inf_nan=False)]


class CheckpointRequest(_Wire):
    """The manager asks a job to checkpoint now: the agent writes ``{"id": id, "exit": exit}``
    to the job's request file; the job's next ``saved.json`` carries ``request: id``."""

    namespace: Name
    pod: Name
    uid: Annotated[str, Field(max_length=64)] = ""
    id: Annotated[str, Field(min_length=1, max_length=64)]
    exit: bool = False


class HeartbeatReply(_Wire):
    accepted: bool
    parameters: Parameters
    #: Jobs the manager wants checkpointed now (namespace/pod), for migrations in flight.
    checkpoint: list[str] = []
    #: The same requests with the id the job must answer (what an agent acts on).
    checkpoint_requests: list[CheckpointRequest] = []


class ReallocationReply(_Wire):
    """The manager's answer to a ReallocationRequest (Algorithm 4, decided at once)."""

    decision: Literal["migrate", "stay", "refused"]
    target: str | None = None
    reason: Annotated[str, Field(max_length=256)] = ""
    #: True: the job is marked migrated (moved, or best where it is); never request it again.
    migrated: bool = False
    #: The manager's own: True when observe mode answered in place of a move it would have
    #: made (``decision`` is then ``stay``). Never sent: a 0.1 agent refuses unknown keys.
    observed: bool = Field(default=False, exclude=True)


_Report = TypeVar("_Report")


def latest_reports(reports: Iterable[_Report],
                   get: Callable[[_Report, str], Any] = getattr) -> list[_Report]:
    """One job report per namespace/pod, for the ``/status/whatif-input`` reply (its manager
    builds it, ``specon whatif`` reads it): during a move the source's last heartbeat and the
    target's can both report a job. Kept: the most recent (``reported``), on a tie a fresh
    node's, then the node first by name; in the order first seen. ``get`` reads a field
    (``getattr`` for models, ``operator.getitem`` for dicts)."""
    kept: dict[str, _Report] = {}
    for r in reports:
        key = f"{get(r, 'namespace')}/{get(r, 'pod')}"
        old = kept.get(key)
        if old is None or (get(r, "reported"), get(r, "fresh"), get(old, "node")) > (
                get(old, "reported"), get(old, "fresh"), get(r, "node")):
            kept[key] = r
    return list(kept.values())
