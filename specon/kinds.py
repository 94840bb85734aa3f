"""A training job's kind: the ``specon.io/kind`` label where the pod has one, else its
container's image. The manager takes a new pod to be like the running jobs of its kind
(specon.core.job_loads.new_job_load): the agent reports each job's kind, the extender reads the
pod's. Pure: labels and an image in, a kind or None out; whatever a pod names is checked
here (a plausible image reference or label value, of bounded length)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from specon.names import LABEL_KIND

#: The longest kind kept (an image reference with a registry, a path, a tag and a digest fits).
MAX_KIND = 512
#: What a kind may hold: the characters of image references and of label values.
KIND_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$"
_KIND = re.compile(KIND_PATTERN)


def valid_kind(value: object) -> str | None:
    """``value`` when it is a plausible kind, else None."""
    if isinstance(value, str) and 0 < len(value) <= MAX_KIND and _KIND.match(value):
        return value
    return None


def job_kind(labels: object, image: object) -> str | None:
    """The kind of a job whose pod (or container) has ``labels`` and runs ``image``: the
    label where it is a valid kind, else the image where that is; None when neither."""
    label = labels.get(LABEL_KIND) if isinstance(labels, Mapping) else None
    return valid_kind(label) or valid_kind(image)


def pod_kind(pod: Mapping[str, Any]) -> str | None:
    """The kind of a pod (the API's JSON) about to be placed: its label, else its first
    container's image (as the agent reports that container's job)."""
    meta = pod.get("metadata")
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    first = containers[0] if isinstance(containers, list) and containers else None
    image = first.get("image") if isinstance(first, Mapping) else None
    return job_kind(meta.get("labels") if isinstance(meta, Mapping) else None, image)


def container_image(pod: Mapping[str, Any], container: str) -> str | None:
    """The image the pod's spec gives the container named ``container`` (the name the user
    wrote, not the resolved digest a container status shows); None when not found."""
    spec = pod.get("spec")
    for c in (spec.get("containers") if isinstance(spec, Mapping) else None) or ():
        if isinstance(c, Mapping) and c.get("name") == container:
            image = c.get("image")
            return image if isinstance(image, str) else None
    return None
