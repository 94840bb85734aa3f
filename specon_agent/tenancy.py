"""Where a pod's files are: beneath its own namespace's folder of the shared volume.

A pod names its progress file, checkpoint folder and metrics CSV file in annotations
(``specon.io/progress-file``, ``specon.io/checkpoint-dir``, ``specon.io/metrics-csv``). Each
resolves beneath ``<progress_root>/<namespace>/``, the namespace being the pod's own as
discovered from its metadata, never one an annotation names:

- a relative path is taken from the namespace's folder: ``jobs/a`` in namespace ``training``
  is ``<root>/training/jobs/a``;
- an absolute path is taken from the shared volume's root and must lie in the namespace's
  folder: ``/training/jobs/a`` is the same folder, ``/other/jobs/a`` is refused;
- ``..`` anywhere is refused.

The agent then opens every such path beneath the shared root with the confinement of
:mod:`specon_agent.safefs` (no symlink at any component, the namespace's folder included), so
one tenant's pod can neither read another namespace's files nor make the agent write into them
(a ``request.json`` with ``done: true`` stopped the other tenant's job). A refused path is
counted in ``specon_agent_file_refusals_total{what}`` and logged once, at the job's arrival;
the job is followed without it (its log instead of a progress file, no checkpoint folder).
"""

from __future__ import annotations

import errno
import logging
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from specon import names

from .safefs import ConfinementError, relative_parts

log = logging.getLogger(__name__)

#: A Kubernetes namespace name (an RFC 1123 label): one path component, never ``.`` or ``..``.
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")

#: The annotations that name files, and what their refusals are counted as.
FILE_ANNOTATIONS = ((names.ANNOTATION_PROGRESS_FILE, "progress"),
                    (names.ANNOTATION_CHECKPOINT_DIR, "checkpoint"),
                    (names.ANNOTATION_METRICS_CSV, "metrics-csv"))


def pod_path(root: Path, namespace: str, given: str) -> Path:
    """The path ``given`` (an annotation's value) names for a pod of ``namespace``, as the agent
    sees it: always ``root/namespace/...`` without ``..``; :class:`ConfinementError` when it
    names anything else."""
    if not NAMESPACE.match(namespace):
        raise ConfinementError(errno.EINVAL, f"namespace {namespace!r} is not a folder name")
    parts = relative_parts(given)  # ``..`` refused, ``.`` and empty components dropped
    if PurePosixPath(given).is_absolute():
        if parts[0] != namespace:
            raise ConfinementError(errno.EXDEV, f"{given!r} is not beneath /{namespace}/, the "
                                   "folder of the pod's namespace")
        parts = parts[1:]
    return root.joinpath(namespace, *parts)


def pod_files(
    root: Path | None, namespace: str, annotations: Mapping[str, Any]
) -> tuple[dict[str, Path | None], tuple[tuple[str, str], ...]]:
    """The paths a pod's annotations name beneath its namespace's folder, by what they are
    (``progress``, ``checkpoint``, ``metrics-csv``; None when not named), and the refusals,
    each (what, why). Nothing without a root."""
    found: dict[str, Path | None] = {what: None for _, what in FILE_ANNOTATIONS}
    refused: list[tuple[str, str]] = []
    for key, what in FILE_ANNOTATIONS:
        given = annotations.get(key)
        if root is None or not given or not isinstance(given, str):
            continue
        try:
            found[what] = pod_path(root, namespace, given)
        except ConfinementError as exc:
            refused.append((what, f"{key} {given!r} refused: {exc.strerror or exc}"))
    return found, tuple(refused)


def count_refusals(name: str, refusals: tuple[tuple[str, str], ...], counter: Any) -> None:
    """Count each refused path in ``counter`` (``specon_agent_file_refusals_total``) and log it:
    once per job, when it arrives."""
    for what, why in refusals:
        counter.labels(what).inc()
        log.warning("%s: %s", name, why)
