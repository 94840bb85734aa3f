"""SpeCon's vocabulary, defined once: the labels and annotations it reads and writes on pods and
Jobs, the scheduling gate, the scheduler name, and the environment variables and files of the
training contract (docs/training-contract.md). Every other module takes its names from here,
and ``tests/test_vocabulary.py`` checks that each ``specon.io/…`` name, ``SPECON_…`` variable
and contract file the docs, the chart and the examples mention is one of these.

The opt-in rule, shared by the agent (which pods it follows) and the manager (which pods the
extender scores and may move): :func:`opted_in`.

Standard library only: the training SDK imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PREFIX = "specon.io/"

# -- what a user puts on a training pod ------------------------------------------------------
#: Label (or annotation) ``"true"``: the pod is a training job, followed and throttled.
LABEL_TRAINING = "specon.io/training"
#: Label ``"true"``: the job honours the checkpoint contract and may be migrated.
LABEL_MIGRATABLE = "specon.io/migratable"
#: The job's progress file and checkpoint folder, relative to the shared volume's root.
ANNOTATION_PROGRESS_FILE = "specon.io/progress-file"
ANNOTATION_CHECKPOINT_DIR = "specon.io/checkpoint-dir"
#: A metrics CSV file (Lightning's CSVLogger ``metrics.csv``) the agent reads the loss from,
#: when the job writes no progress file; like the two above, beneath the namespace's folder.
ANNOTATION_METRICS_CSV = "specon.io/metrics-csv"
#: A pattern with a ``(?P<loss>…)`` group for logs in no known format.
ANNOTATION_LOSS_REGEX = "specon.io/loss-regex"
#: Quality target and deadline (docs/qos.md), and the job's total steps.
ANNOTATION_TARGET_LOSS = "specon.io/target-loss"
ANNOTATION_DEADLINE = "specon.io/deadline"
ANNOTATION_STOP_AT_TARGET = "specon.io/stop-at-target"
ANNOTATION_TOTAL_STEPS = "specon.io/total-steps"
#: Label: the job's kind (jobs of one kind are alike in the cores they use and roughly in
#: their work: a sweep's trials). Absent: the container's image (specon.kinds).
LABEL_KIND = "specon.io/kind"
#: The scheduler profile name a pod may select instead of the label.
SCHEDULER_NAME = "specon"

# -- what an administrator puts on a node ----------------------------------------------------
#: Label: the per-core speed of the node's CPUs relative to the cluster's others (1.0 when
#: absent; a node whose cores do a training step in half the time is 2). The progress-aware
#: placement and moves compare nodes by it (specon_manager.node_speed, docs/manager.md).
LABEL_CPU_SPEED = "specon.io/cpu-speed"

# -- what the manager writes ----------------------------------------------------------------
#: A migration's record (JSON) on the Job or the replacement pod.
ANNOTATION_MIGRATION = "specon.io/migration"
#: The job was migrated (the migration id, ``stayed`` or ``cancelled``) / rebalanced.
ANNOTATION_MIGRATED = "specon.io/migrated"
ANNOTATION_MIGRATED_AT = "specon.io/migrated-at"
ANNOTATION_REBALANCED = "specon.io/rebalanced"
#: On a bare replacement pod: the migration it belongs to.
ANNOTATION_MIGRATION_ID = "specon.io/migration-id"
#: On an owner's new pod that waited for the pod it replaces: the migration, written once that
#: pod is gone. The update has the scheduler try the new pod again at once: the extender had
#: turned it away while the source terminated, and kube-scheduler retries a pod an extender
#: refused only on a cluster event, or after five minutes.
ANNOTATION_SOURCE_GONE = "specon.io/source-gone"
#: On the Job (or a bare pod): the running mean of its measured move costs, in seconds
#: (specon.core.move_cost); the planner charges its moves this instead of migration_cost_s.
ANNOTATION_MOVE_COST = "specon.io/move-cost-s"
#: The pod's SpeCon state (JSON: category, limitCores, predictedCompletion, node, updated),
#: kept by the manager from its agent's heartbeats (docs/user-guide.md).
ANNOTATION_STATE = "specon.io/state"
#: Label ``"true"`` while a migration of the object is in flight (what a restart lists).
LABEL_MIGRATING = "specon.io/migrating"
#: The scheduling gate that holds a replacement until its source is gone.
GATE_MIGRATION = "specon.io/migration"
#: The node agent as the ``reportingController`` of its Events (docs/agent.md, "Events").
REPORTER_AGENT = "specon.io/agent"

# -- the training contract: environment and files -------------------------------------------
#: Folder of the job's checkpoints (on the shared volume); unset: checkpointing is off.
ENV_CHECKPOINT_DIR = "SPECON_CHECKPOINT_DIR"
#: Also save every N completed steps (0 or unset: only on request or SIGTERM).
ENV_CHECKPOINT_EVERY = "SPECON_CHECKPOINT_EVERY"
#: The job's progress file (JSON lines).
ENV_PROGRESS_FILE = "SPECON_PROGRESS_FILE"
#: In the checkpoint folder: the request to checkpoint, the "saved" signal, the thread hint.
REQUEST_FILE = "request.json"
SAVED_FILE = "saved.json"
THREADS_FILE = "threads.json"

LABELS = (LABEL_TRAINING, LABEL_MIGRATABLE, LABEL_MIGRATING, LABEL_CPU_SPEED, LABEL_KIND)
ANNOTATIONS = (
    ANNOTATION_PROGRESS_FILE, ANNOTATION_CHECKPOINT_DIR, ANNOTATION_METRICS_CSV,
    ANNOTATION_LOSS_REGEX,
    ANNOTATION_TARGET_LOSS, ANNOTATION_DEADLINE, ANNOTATION_STOP_AT_TARGET,
    ANNOTATION_TOTAL_STEPS, ANNOTATION_MIGRATION, ANNOTATION_MIGRATED, ANNOTATION_MIGRATED_AT,
    ANNOTATION_REBALANCED, ANNOTATION_MIGRATION_ID, ANNOTATION_SOURCE_GONE, ANNOTATION_MOVE_COST,
    ANNOTATION_STATE,
)
GATES = (GATE_MIGRATION,)
REPORTERS = (REPORTER_AGENT,)
ENVIRONMENT = (ENV_CHECKPOINT_DIR, ENV_CHECKPOINT_EVERY, ENV_PROGRESS_FILE)
FILES = (REQUEST_FILE, SAVED_FILE, THREADS_FILE)


def migratable(labels: Mapping[str, Any]) -> bool:
    """Whether a pod's labels opt it in to migration (``specon.io/migratable: "true"``): it may
    be moved by checkpoint and restore, and it is placed as one that can be."""
    return labels.get(LABEL_MIGRATABLE) == "true"


def opted_in(pod: Mapping[str, Any], label: str = LABEL_TRAINING,
             scheduler_name: str = SCHEDULER_NAME) -> bool:
    """Whether a pod (the API's JSON) is a training job SpeCon follows: ``label`` set to
    ``"true"`` as a label or an annotation, or ``spec.schedulerName`` equal to
    ``scheduler_name`` (empty: that way is off). Wrongly typed parts count as absent."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    for part in ("labels", "annotations"):
        values = meta.get(part)
        if isinstance(values, Mapping) and values.get(label) == "true":
            return True
    spec = pod.get("spec")
    return bool(scheduler_name) and isinstance(spec, Mapping) and (
        spec.get("schedulerName") == scheduler_name)
