"""The agent's half of checkpoint requests (docs/training-contract.md §4): ``request.json`` in
the job's checkpoint folder, asking it to save (and stop, or stop for good), written confined
to the folder (:mod:`specon_agent.safefs`). The job's SDK reads it between steps."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from .checkpoints import SMALL_FILE, checkpoint_dirfd
from .discovery import Target
from .metrics import AgentMetrics
from .safefs import ConfinementError, read_beneath, write_beneath

log = logging.getLogger(__name__)


def write_request(target: Target, rid: str, exit: bool, metrics: AgentMetrics,
                  done: bool = False) -> None:
    """Write the job's request file (docs/training-contract.md §4), atomically, unless it
    already names ``rid``; a refusal of the confinement is counted in ``metrics``."""
    if target.checkpoint_dir is None:
        return
    path = target.checkpoint_dir / "request.json"
    body: dict[str, Any] = {"id": rid, "exit": exit}
    if done:
        body["done"] = True
    try:
        dfd = checkpoint_dirfd(target)
        try:
            try:
                if json.loads(read_beneath(dfd, "request.json", SMALL_FILE)).get("id") == rid:
                    return
            except FileNotFoundError:
                pass
            write_beneath(dfd, "request.json", json.dumps(body).encode())
        finally:
            os.close(dfd)
        log.info("asked %s for checkpoint %s", target.name, rid)
    except ConfinementError as exc:
        metrics.confinement_refusals.labels("checkpoint").inc()
        log.warning("%s: request not written, %s refused: %s", target.name, path, exc)
    except (OSError, ValueError, AttributeError) as exc:
        log.warning("cannot write %s: %s", path, exc)
