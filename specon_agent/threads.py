"""The agent's half of the thread hint (docs/training-contract.md §8): after it changes a job's
CPU limit it writes ``threads.json`` into the job's checkpoint directory, beside the checkpoint
request, naming the thread count for that limit (:func:`specon.core.threads.threads_for_limit`).
The job's SDK reads it between steps. Kept apart from the loop so that file access stays in one
small function.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path

from specon.core.threads import threads_for_limit
from specon.sdk.threads import THREADS_FILE

log = logging.getLogger(__name__)


def write_thread_hint(
    directory: Path, limit_cores: float | None, visible_cores: float, name: str = ""
) -> int | None:
    """Write the hint for ``limit_cores`` (None: unlimited) atomically (temp file in the same
    directory, then rename); the thread count written, or None when it could not be."""
    threads = threads_for_limit(limit_cores, visible_cores)
    body = {
        "threads": threads,
        "limit_cores": None if limit_cores is None else round(limit_cores, 4),
        "visible_cores": visible_cores,
    }
    path = directory / THREADS_FILE
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-threads-")
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide it from a job running as another user
        with os.fdopen(fd, "w") as f:
            json.dump(body, f)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot write the thread hint %s: %s", path, exc)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return None
    log.info("thread hint for %s: %d threads (limit %s cores)", name or directory, threads,
             "unlimited" if limit_cores is None else f"{limit_cores:.3f}")
    return threads
