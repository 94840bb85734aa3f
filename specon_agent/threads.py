"""The agent's half of the thread hint (docs/training-contract.md §8): after it changes a job's
CPU limit it writes ``threads.json`` into the job's checkpoint directory, beside the checkpoint
request, naming the thread count for that limit (:func:`specon.core.threads.threads_for_limit`).
The job's SDK reads it between steps. Kept apart from the loop so that file access stays in one
small function (:func:`write_thread_hint`), with when the loop writes it: after a limit changes
(:func:`hint_threads`) and after the limits are restored (:func:`hints_restored`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from specon.core.threads import threads_for_limit
from specon.sdk.threads import THREADS_FILE

from .actuators import Actuator, ActuatorError
from .checkpoints import checkpoint_dirfd
from .safefs import write_beneath

if TYPE_CHECKING:
    from .followed import FollowedJob

log = logging.getLogger(__name__)


def write_thread_hint(
    directory: Path, limit_cores: float | None, visible_cores: float, name: str = "",
    opener: Callable[[], int] | None = None,
) -> int | None:
    """Write the hint for ``limit_cores`` (None: unlimited) atomically (an unguessable
    temporary file in the same folder, then rename: :func:`specon_agent.safefs.write_beneath`);
    the thread count written, or None when it could not be. ``opener`` gives an fd for the
    folder opened confined (the agent's, for a folder named by a pod); without it the
    folder is ``directory`` as it is."""
    threads = threads_for_limit(limit_cores, visible_cores)
    body = {
        "threads": threads,
        "limit_cores": None if limit_cores is None else round(limit_cores, 4),
        "visible_cores": visible_cores,
    }
    path = directory / THREADS_FILE
    try:
        dfd = opener() if opener is not None else os.open(
            directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            write_beneath(dfd, THREADS_FILE, json.dumps(body).encode())
        finally:
            os.close(dfd)
    except OSError as exc:  # a refusal of the confinement too (ConfinementError)
        log.warning("cannot write the thread hint %s: %s", path, exc)
        return None
    log.info("thread hint for %s: %d threads (limit %s cores)", name or directory, threads,
             "unlimited" if limit_cores is None else f"{limit_cores:.3f}")
    return threads


def hint_threads(job: FollowedJob, cores: float | None, actuator: Actuator) -> None:
    """Tell the job how many threads its new limit of ``cores`` is worth (training contract
    §6), unless it was told that count already, it has no checkpoint folder, or the agent only
    observes (its limit unchanged, it is told nothing)."""
    if job.target.checkpoint_dir is None or actuator.observing:
        return
    if threads_for_limit(cores, actuator.node_cpus) == job.threads_hint:
        return
    written = write_thread_hint(job.target.checkpoint_dir, cores, actuator.node_cpus,
                                job.target.name, opener=lambda: checkpoint_dirfd(job.target))
    if written is not None:
        job.threads_hint = written


def hints_restored(jobs: Mapping[str, FollowedJob], actuator: Actuator,
                   failed: Mapping[str, ActuatorError]) -> None:
    """The limits went back to what they were: so do the thread hints written for them (the
    jobs whose limit could not be restored, ``failed``, keep theirs)."""
    for cid, job in jobs.items():
        if job.threads_hint is None or cid in failed:
            continue
        try:
            cores = actuator.read(cid).cores
        except ActuatorError:
            continue  # gone: nobody to tell
        hint_threads(job, cores, actuator)
