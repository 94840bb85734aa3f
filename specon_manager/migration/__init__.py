"""Migration (SpeCon Algorithm 4, made safe): reserve the target, have the job
checkpoint, wait for the verified checkpoint, evict, and see the replacement placed there.

Every step is recorded in a JSON annotation (``specon.io/migration``) on the object that holds
the job at that moment: the source pod until it is evicted, then the Job (Job-owned pods) or
the gated replacement pod (bare pods). A restarted manager lists those records and resumes or
rolls back each migration in flight. Phases::

    reserved -> checkpointing -> evicting -> placing -> done
                     \\-> cancelled (timeout, pod ended, eviction refused, target unfit): the
                         job stays; or cancelled because its user deleted it (its pod, its
                         owner, its replacement; in any phase): nothing is recreated.

Safety rules: only Running pods labelled ``specon.io/migratable=true``, either bare or owned by
an owner that never starts a second pod while the first one terminates and that the eviction
cannot fail (a Job with ``podReplacementPolicy: Failed``, also in a single-pod JobSet; a
single-replica StatefulSet, PyTorchJob or, on request, ReplicaSet: ``why_not_movable``);
nothing is evicted before the job's checkpoint answers this migration's request; a bare
pod's replacement is created (with a scheduling gate, so it cannot run, and pinned to the
target by node affinity, so it lands there even while the extender is away) before the pod is
evicted, and ungated only once the pod is gone; never a cordoned target; one migration
per node at a time; a global rate limit; a job is migrated at most once (and rebalanced at
most once). docs/manager.md walks through the phases and what a restart does in each.

The package, by role: ``controller`` (the public API: requests, passes, restore),
``dispatch`` (the record's phase to its handler), one module a phase (``reserve``,
``checkpoint``, ``evict``, ``place``, ``end`` for done and cancelled), what they share
(``context``, ``record``, ``recheck``, ``cost``), and the rules (``movable``: why a pod may not
move, by owner kind; ``pod_spec``: node fit, pinning, the CPU limit).
"""

from specon_manager.migration.controller import MigrationController
from specon_manager.migration.cost import MEASURE_WITHIN_S, started_at
from specon_manager.migration.movable import (
    ENDING,
    PYTORCH_RESTARTS,
    ignores_disruption,
    is_ending,
    owner_of,
    parent_of,
    why_not_movable,
)
from specon_manager.migration.place import no_replacement_coming
from specon_manager.migration.pod_spec import fits, pinned, unpinned, with_cpu_limit
from specon_manager.migration.record import (
    A_MIGRATED,
    A_MIGRATED_AT,
    A_MIGRATION,
    A_MOVE_COST,
    A_REBALANCED,
    PHASES,
    REASONS,
    Migration,
)

__all__ = [
    "A_MIGRATED", "A_MIGRATED_AT", "A_MIGRATION", "A_MOVE_COST", "A_REBALANCED", "ENDING",
    "MEASURE_WITHIN_S", "PHASES", "PYTORCH_RESTARTS", "REASONS", "Migration",
    "MigrationController", "fits", "ignores_disruption", "is_ending", "no_replacement_coming",
    "owner_of", "parent_of", "pinned", "started_at", "unpinned", "why_not_movable",
    "with_cpu_limit",
]
