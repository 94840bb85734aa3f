"""Finding the training containers of this node, and hearing at once when one starts or ends.

``DockerDiscovery`` (standalone): containers labelled ``specon.io/training=true`` on the local
engine, followed through the engine's event stream. ``KubeDiscovery`` (cluster): the pods bound
to this node (a watch with a field selector on ``spec.nodeName``) that opt in by label or
annotation, with the container IDs from pod status. Both push :class:`Arrived`,
:class:`Departed` and :class:`Resync` events to the agent's queue from a thread of their own;
after any break they reconnect with back-off and send a full :class:`Resync`, so a change
missed while away is never lost.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from specon import names
from specon.kinds import container_image, job_kind
from specon.qos_annotations import QosSpec, parse_timestamp, read, total_steps

from .actuators.base import bare_id
from .tail import newest_cri_log
from .tenancy import pod_files

log = logging.getLogger(__name__)

ANNOTATION_PROGRESS = names.ANNOTATION_PROGRESS_FILE
ANNOTATION_CHECKPOINT = names.ANNOTATION_CHECKPOINT_DIR
ANNOTATION_REGEX = names.ANNOTATION_LOSS_REGEX
ENV_PROGRESS = names.ENV_PROGRESS_FILE
ENV_CHECKPOINT = names.ENV_CHECKPOINT_DIR


@dataclass(frozen=True)
class Target:
    """One training container the agent follows."""

    cid: str  # bare container ID
    namespace: str  # "docker" for a standalone container
    pod: str  # the pod's (or the Docker container's) name
    container: str = "main"
    uid: str = ""
    log_path: Path | None = None
    log_kind: str = "docker-json"  # or "cri"
    progress_path: Path | None = None  # the SDK's progress file, as this agent sees it
    checkpoint_dir: Path | None = None
    #: A metrics CSV file (specon.io/metrics-csv), read when there is no progress file.
    metrics_csv: Path | None = None
    #: The root that progress_path, checkpoint_dir and metrics_csv come from a pod's
    #: annotations beneath: the agent opens them confined to it (specon_agent.safefs), never
    #: through a symlink. A pod's paths lie in its namespace's folder of it
    #: (specon_agent.tenancy).
    file_root: Path | None = None
    #: (what, why) for each path the pod named that was refused (counted at arrival).
    file_refusals: tuple[tuple[str, str], ...] = ()
    migratable: bool = False
    loss_regex: str | None = None  # a user's pattern with a (?P<loss>...) group
    #: The quality target / deadline the pod states (None: none, or malformed).
    qos: QosSpec | None = None
    qos_error: str | None = None  # why the stated one was refused (the agent logs it once)
    created: float | None = None  # the pod's (container's) creation, seconds since the epoch
    total_steps: int | None = None  # the steps it declares it runs in all (specon.io/total-steps)
    kind: str | None = None  # specon.kinds: its specon.io/kind label, else its image
    #: Its pod is being deleted (``deletionTimestamp``): followed to its end (its limit is put
    #: back, its last checkpoint verified), but no longer a job that will run to completion.
    ending: bool = False

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.pod}"


@dataclass(frozen=True)
class Arrived:
    target: Target


@dataclass(frozen=True)
class Departed:
    cid: str


@dataclass(frozen=True)
class Ending:
    """A followed container's pod is being deleted (it is followed until it departs)."""

    cid: str


@dataclass(frozen=True)
class Resync:
    """The complete set of training containers now on the node."""

    targets: tuple[Target, ...]


Event = Arrived | Departed | Ending | Resync


class _Watcher:
    """A thread that runs ``session`` over and over, with back-off between broken sessions."""

    def __init__(self, name: str, on_error: Callable[[str], None] | None) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._name = name
        self._on_error = on_error or (lambda _reason: None)
        self.connected = threading.Event()

    def start(self, out: queue.Queue[Event]) -> None:
        self._thread = threading.Thread(target=self._loop, args=(out,), name=self._name,
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._interrupt()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _interrupt(self) -> None:
        """Break a blocking read of the stream (subclasses)."""

    def _loop(self, out: queue.Queue[Event]) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                self._session(out)
                delay = 0.5
            except Exception as exc:
                self.connected.clear()
                if self._stop.is_set():
                    break
                log.warning("%s: %s; reconnecting in %.1f s", self._name, exc, delay)
                self._on_error(type(exc).__name__)
                self._stop.wait(delay)
                delay = min(delay * 2, 30.0)
            else:
                self.connected.clear()
                if not self._stop.is_set():
                    self._on_error("stream_ended")
                    self._stop.wait(delay)

    def _session(self, out: queue.Queue[Event]) -> None:
        raise NotImplementedError


def read_qos(
    stated: Mapping[str, str], created: str | None
) -> tuple[QosSpec | None, str | None, float | None]:
    """(spec, error, creation time) from a pod's annotations or a container's labels."""
    when = parse_timestamp(created)
    spec, problem = read(stated, when)
    return spec, problem, when.timestamp() if when else None


def host_path(path: str, mounts: Iterable[Mapping[str, Any]]) -> Path | None:
    """The host path of ``path`` inside a container, through its bind mounts and volumes (the
    longest matching destination wins); None when the path is on no mount."""
    p = PurePosixPath(path)
    best: tuple[int, Path] | None = None
    for m in mounts:
        dest, src = m.get("Destination"), m.get("Source")
        if not dest or not src:
            continue
        d = PurePosixPath(dest)
        if (p == d or d in p.parents) and (best is None or len(d.parts) > best[0]):
            best = (len(d.parts), Path(src) / p.relative_to(d))
    return None if best is None else best[1]


class DockerDiscovery(_Watcher):
    """Training containers on the local Docker Engine, by label."""

    def __init__(self, client: Any, label: str, on_error: Callable[[str], None] | None = None):
        super().__init__("docker-discovery", on_error)
        self.client = client
        self.label = label
        self._stream: Any = None

    def _filter(self) -> str:
        return f"{self.label}=true"

    def target(self, attrs: Mapping[str, Any]) -> Target | None:
        """The target for one ``docker inspect`` document (None: not running)."""
        state = attrs.get("State") or {}
        if not state.get("Running") or state.get("Restarting"):
            return None
        env = dict(e.split("=", 1) for e in (attrs.get("Config") or {}).get("Env") or []
                   if "=" in e)
        mounts = attrs.get("Mounts") or []
        progress = env.get(ENV_PROGRESS)
        ckpt = env.get(ENV_CHECKPOINT)
        labels = (attrs.get("Config") or {}).get("Labels") or {}
        log_path = attrs.get("LogPath") or None
        qos, problem, created = read_qos(labels, attrs.get("Created"))
        return Target(
            cid=bare_id(attrs["Id"]),
            namespace="docker",
            pod=str(attrs.get("Name", "")).lstrip("/") or attrs["Id"][:12],
            container="main",
            log_path=Path(log_path) if log_path else None,
            log_kind="docker-json",
            progress_path=host_path(progress, mounts) if progress else None,
            checkpoint_dir=host_path(ckpt, mounts) if ckpt else None,
            migratable=names.migratable(labels),
            loss_regex=labels.get(ANNOTATION_REGEX) or None,
            qos=qos, qos_error=problem, created=created, total_steps=total_steps(labels),
            kind=job_kind(labels, (attrs.get("Config") or {}).get("Image")),
        )

    def list(self) -> list[Target]:
        out = []
        for summary in self.client.api.containers(filters={"label": self._filter()}):
            try:
                t = self.target(self.client.api.inspect_container(summary["Id"]))
            except Exception as exc:  # gone between the list and the inspect
                log.debug("inspect %s: %s", summary["Id"][:12], exc)
                continue
            if t is not None:
                out.append(t)
        return out

    def _interrupt(self) -> None:
        stream = self._stream
        if stream is not None:
            try:
                stream.close()
            except Exception as exc:  # closing a broken stream: nothing to save
                log.debug("closing the event stream: %s", exc)

    def _session(self, out: queue.Queue[Event]) -> None:
        # Subscribe first, then list: a container that starts in between is in one or both,
        # and the agent ignores an arrival it already has.
        self._stream = self.client.api.events(
            decode=True,
            filters={"type": "container", "label": self._filter(),
                     "event": ["start", "die", "destroy"]},
        )
        out.put(Resync(tuple(self.list())))
        self.connected.set()
        for ev in self._stream:
            cid = ev.get("id") or (ev.get("Actor") or {}).get("ID")
            status = ev.get("status") or ev.get("Action")
            if not cid:
                continue
            if status == "start":
                try:
                    t = self.target(self.client.api.inspect_container(cid))
                except Exception as exc:
                    log.debug("inspect %s after start: %s", cid[:12], exc)
                    continue
                if t is not None:
                    out.put(Arrived(t))
            elif status in ("die", "destroy"):
                out.put(Departed(bare_id(cid)))


def pod_targets(
    pod: Mapping[str, Any], label: str, log_root: Path, progress_root: Path | None,
    scheduler_name: str = "specon",
) -> list[Target]:
    """The running training containers of one pod (the API's JSON, camelCase keys). A pod opts
    in by ``label`` (as a label or an annotation, value "true") or by its scheduler name."""
    if not names.opted_in(pod, label, scheduler_name):  # the manager's rule too
        return []
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp") is None and status.get("phase") not in (None, "Running"):
        return []
    ns, name, uid = meta.get("namespace", "default"), meta.get("name", ""), meta.get("uid", "")
    ann = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    # Beneath the folder of the pod's own namespace, whatever the annotations say.
    files, refused = pod_files(progress_root, ns, ann)
    qos, problem, created = read_qos(ann, meta.get("creationTimestamp"))
    out = []
    for cs in status.get("containerStatuses") or []:
        cid = cs.get("containerID")
        if not cid or "running" not in (cs.get("state") or {}):
            continue
        cdir = log_root / f"{ns}_{name}_{uid}" / cs.get("name", "")
        path = cdir / f"{cs.get('restartCount', 0)}.log"
        if not path.exists():
            path = newest_cri_log(cdir) or path
        out.append(Target(
            cid=bare_id(cid), namespace=ns, pod=name, container=cs.get("name", "main"), uid=uid,
            log_path=path, log_kind="cri", progress_path=files["progress"],
            checkpoint_dir=files["checkpoint"], metrics_csv=files["metrics-csv"],
            file_root=progress_root, file_refusals=refused,
            migratable=names.migratable(labels),
            loss_regex=ann.get(ANNOTATION_REGEX) or None,
            qos=qos, qos_error=problem, created=created, total_steps=total_steps(ann),
            ending=meta.get("deletionTimestamp") is not None,
            kind=job_kind(labels, container_image(pod, cs.get("name", ""))),
        ))
    return out


class KubeDiscovery(_Watcher):
    """Pods bound to this node, through the Kubernetes API (list, then watch)."""

    def __init__(
        self,
        api: Any,  # kubernetes.client.CoreV1Api
        node: str,
        label: str,
        log_root: Path,
        progress_root: Path | None = None,
        on_error: Callable[[str], None] | None = None,
        scheduler_name: str = "specon",
    ) -> None:
        super().__init__("kube-discovery", on_error)
        self.scheduler_name = scheduler_name
        self.api = api
        self.node = node
        self.label = label
        self.log_root = log_root
        self.progress_root = progress_root
        self._watch: Any = None

    def _targets(self, pod: Mapping[str, Any]) -> list[Target]:
        return pod_targets(pod, self.label, self.log_root, self.progress_root,
                           self.scheduler_name)

    def _interrupt(self) -> None:
        if self._watch is not None:
            self._watch.stop()

    def _session(self, out: queue.Queue[Event]) -> None:
        from kubernetes import watch

        selector = f"spec.nodeName={self.node}"
        listing = self.api.list_pod_for_all_namespaces(
            field_selector=selector, _preload_content=False, _request_timeout=30)
        import json

        doc = json.loads(listing.data)
        pods: dict[str, list[Target]] = {}
        for pod in doc.get("items") or []:
            pods[(pod.get("metadata") or {}).get("uid", "")] = self._targets(pod)
        out.put(Resync(tuple(t for ts in pods.values() for t in ts)))
        self.connected.set()
        version = (doc.get("metadata") or {}).get("resourceVersion")
        self._watch = watch.Watch()  # type: ignore[no-untyped-call]
        for ev in self._watch.stream(
            self.api.list_pod_for_all_namespaces, field_selector=selector,
            resource_version=version, timeout_seconds=300, _request_timeout=330,
        ):
            obj = ev.get("raw_object") or {}
            if ev.get("type") == "ERROR":
                raise RuntimeError(f"watch error: {obj.get('message', obj)}")
            uid = (obj.get("metadata") or {}).get("uid", "")
            before = {t.cid: t for t in pods.get(uid, [])}
            now = [] if ev.get("type") == "DELETED" else self._targets(obj)
            pods[uid] = now
            if not now:
                pods.pop(uid, None)
            after = {t.cid: t for t in now}
            for cid in before.keys() - after.keys():
                out.put(Departed(cid))
            for cid in after.keys() - before.keys():
                out.put(Arrived(after[cid]))
            for cid in after.keys() & before.keys():
                if after[cid].ending and not before[cid].ending:
                    out.put(Ending(cid))
