"""CPU limits by direct cgroup writes: v1 ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``, v2
``cpu.max``.

Finds a container's cgroup from its ID under the cgroupfs layouts (``docker/<id>``,
``kubepods/<qos>/pod<uid>/<id>``) and the systemd ones (``…/docker-<id>.scope``,
``…/cri-containerd-<id>.scope``, ``…/crio-<id>.scope``). The engine and the Kubernetes API do
not see such a write (``docker inspect`` keeps its own value): this serves runtimes with no
limit API of their own.

Under the kubelet, a container's cgroup sits in its pod's, which holds the sum of the pod's
limits. A raise above the pod's quota is refused by cgroup v1 (``EINVAL``) and capped by v2's
hierarchy, so the pod's quota is lifted first (made unlimited; each container keeps its own
quota) and put back once no container of that pod is left above its owner's limit.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .base import (
    DEFAULT_PERIOD_US,
    Actuator,
    ActuatorError,
    ActuatorUnavailable,
    ContainerGone,
    CpuLimit,
    LimitChange,
    bare_id,
)

if TYPE_CHECKING:
    from .ledger import Ledger

log = logging.getLogger(__name__)

#: Deep enough for kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/<id>.scope
#: under a nested root; bounded so that a pathological tree is not walked forever.
_MAX_DEPTH = 8
_HEX = frozenset("0123456789abcdef")


def cpu_cgroup_root(mountinfo: Path = Path("/proc/self/mountinfo")) -> tuple[Path, int]:
    """The mount that holds the ``cpu`` controller and its cgroup version (1 or 2).

    On a hybrid host (v1 controllers plus an empty v2 ``unified`` mount) the v1 ``cpu`` mount
    wins, since the v2 one then has no ``cpu`` controller.
    """
    v2: Path | None = None
    for line in mountinfo.read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if len(fields) < 5 or len(extra) < 3:
            continue
        mount_point = Path(fields[4].replace("\\040", " "))
        fstype, super_options = extra[0], extra[2].split(",")
        if fstype == "cgroup" and "cpu" in super_options:
            return mount_point, 1
        if fstype == "cgroup2" and v2 is None:
            controllers = mount_point / "cgroup.controllers"
            if controllers.exists() and "cpu" in controllers.read_text().split():
                v2 = mount_point
    if v2 is not None:
        return v2, 2
    raise ActuatorUnavailable("-", "no cgroup mount with the cpu controller (v1 cpu or v2)")


def _id_in_name(name: str) -> str | None:
    """The container ID a cgroup directory is named for, if any."""
    if "conmon" in name:  # CRI-O's monitor process has a scope of its own beside the container
        return None
    stem = name.removesuffix(".scope")
    candidate = stem.rsplit("-", 1)[-1]
    if len(candidate) >= 12 and set(candidate) <= _HEX:
        return candidate
    return None


class CgroupActuator(Actuator):
    """Writes the CFS quota of a container's cgroup directly.

    ``root`` and ``version`` name the hierarchy (default: the mount holding the ``cpu``
    controller, from ``/proc/self/mountinfo``; an agent that mounts the host's tree elsewhere
    passes that path). ``node_cpus`` defaults to ``os.cpu_count()``.
    """

    name = "cgroup"

    def __init__(
        self,
        node_cpus: float | None = None,
        period_us: int = DEFAULT_PERIOD_US,
        root: Path | None = None,
        version: int | None = None,
        min_step: float = 0.0,
    ) -> None:
        if root is None:
            root, detected = cpu_cgroup_root()
            version = version or detected
        elif version is None:
            version = 2 if (root / "cgroup.controllers").exists() else 1
        if version not in (1, 2):
            raise ValueError("version must be 1 or 2")
        super().__init__(node_cpus or float(os.cpu_count() or 1), period_us, min_step)
        self.root = root
        self.version = version
        self._paths: dict[str, Path] = {}
        # Parent (pod) cgroups whose quota was lifted, with the limit found there.
        self._lifted: dict[Path, CpuLimit] = {}
        self._parent_of: dict[str, Path] = {}

    # Finding the cgroup

    def find(self, container_id: str) -> Path:
        """The container's cgroup directory (cached while it exists)."""
        cached = self._paths.get(container_id)
        if cached is not None and cached.is_dir():
            return cached
        self._paths.pop(container_id, None)
        wanted = bare_id(container_id).lower()
        if len(wanted) < 12 or not set(wanted) <= _HEX:
            raise ActuatorError(container_id, "a container ID is at least 12 hex digits")
        for depth_matches in self._walk_by_depth():
            matches = [p for p in depth_matches if (_id_in_name(p.name) or "").startswith(wanted)]
            if len(matches) > 1:
                raise ActuatorError(
                    container_id, f"ambiguous ID: {len(matches)} cgroups under {self.root}"
                )
            if matches:
                self._paths[container_id] = matches[0]
                return matches[0]
        raise ContainerGone(container_id, f"no cgroup for this container under {self.root}")

    def _walk_by_depth(self) -> Iterator[list[Path]]:
        level = [self.root]
        for _ in range(_MAX_DEPTH):
            children: list[Path] = []
            for directory in level:
                try:
                    with os.scandir(directory) as entries:
                        children += [
                            Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)
                        ]
                except FileNotFoundError:
                    continue  # removed while walking
            if not children:
                return
            yield children
            level = children

    # Reading and writing

    def read(self, container_id: str) -> CpuLimit:
        return self._read_limit(container_id, self.find(container_id))

    def _read_limit(self, container_id: str, path: Path) -> CpuLimit:
        if self.version == 2:
            quota_text, _, period_text = self._read_file(container_id, path / "cpu.max").partition(
                " "
            )
            return CpuLimit(None if quota_text == "max" else int(quota_text),
                            int(period_text or DEFAULT_PERIOD_US))
        quota = int(self._read_file(container_id, path / "cpu.cfs_quota_us"))
        period = int(self._read_file(container_id, path / "cpu.cfs_period_us"))
        return CpuLimit(None if quota < 0 else quota, period)

    def _write(self, container_id: str, before: CpuLimit, after: CpuLimit) -> None:
        path = self.find(container_id)
        parent = path.parent
        if parent != self.root and self.root in parent.parents and parent not in self._lifted:
            held = self._read_limit(container_id, parent)
            if held.cores is not None and (after.cores is None or after.cores > held.cores):
                # Kept (on disk too) before the write: an agent killed right after it still
                # puts the pod's quota back when it starts again.
                self._lifted[parent] = held
                if self._ledger is not None:
                    self._ledger.lift(self._relative(parent), held)
                try:
                    self._write_limit(container_id, parent, held, CpuLimit(None, held.period_us))
                except ActuatorError:
                    self._forget_lift(parent)
                    raise
                log.info("cgroup: lifted the quota of %s (%s) so a container in it can go "
                         "above it", parent.name, held)
        if parent in self._lifted:
            self._parent_of[container_id] = parent
        self._write_limit(container_id, path, before, after)

    def _write_limit(self, container_id: str, path: Path, before: CpuLimit,
                     after: CpuLimit) -> None:
        if self.version == 2:
            quota = "max" if after.quota_us is None else str(after.quota_us)
            # One write sets both, so no in-between state exists.
            self._write_file(container_id, path / "cpu.max", f"{quota} {after.period_us}")
            return
        quota_file, period_file = path / "cpu.cfs_quota_us", path / "cpu.cfs_period_us"
        if before.period_us != after.period_us:
            # Unlimited first, so the kernel never sees the old quota against the new period.
            self._write_file(container_id, quota_file, "-1")
            self._write_file(container_id, period_file, str(after.period_us))
        self._write_file(
            container_id, quota_file, "-1" if after.quota_us is None else str(after.quota_us)
        )

    def _read_file(self, container_id: str, path: Path) -> str:
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise self._error(container_id, path, exc) from exc

    def _write_file(self, container_id: str, path: Path, value: str) -> None:
        try:
            # One write() call: cgroup files take a value per write, not a stream.
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, value.encode())
            finally:
                os.close(fd)
        except OSError as exc:
            raise self._error(container_id, path, exc) from exc

    def _error(self, container_id: str, path: Path, exc: OSError) -> ActuatorError:
        if exc.errno == errno.ENOENT and path.parent.is_dir():
            return ActuatorUnavailable(
                container_id, f"no {path.name} in {path.parent}: cpu controller not enabled there"
            )
        if exc.errno in (errno.ENOENT, errno.ENODEV, errno.ESRCH):
            self._paths.pop(container_id, None)
            return ContainerGone(container_id, f"cgroup vanished ({path.name})")
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return ActuatorUnavailable(container_id, f"cannot write {path}: {exc.strerror}")
        return ActuatorError(container_id, f"{path.name}: {exc.strerror}")

    def cpu_usage_ns(self, container_id: str) -> int:
        """The container's total CPU time so far (v1 ``cpuacct.usage``, v2 ``cpu.stat``)."""
        path = self.find(container_id)
        if self.version == 2:
            for line in self._read_file(container_id, path / "cpu.stat").splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) * 1000
            raise ActuatorError(container_id, "cpu.stat has no usage_usec")
        # v1: cpuacct may be co-mounted with cpu or mounted on its own beside it; the root may
        # be the hierarchy's top or a subtree of it (the chart mounts the pods' subtree only).
        relative = path.relative_to(self.root)
        top = next((p for p in (self.root, *self.root.parents)
                    if p.name in ("cpu", "cpu,cpuacct")), self.root)
        below = self.root.relative_to(top)
        for base in (self.root, top.parent / "cpuacct" / below,
                     top.parent / "cpu,cpuacct" / below):
            usage = base / relative / "cpuacct.usage"
            if usage.exists():
                return int(self._read_file(container_id, usage))
        raise ContainerGone(container_id, "no cpuacct.usage for this container")

    def cpu_wait_ns(self, container_id: str) -> int:
        """How long some thread of the container has waited for a CPU so far (ns): PSI's
        ``cpu.pressure`` "some" total, which counts waiting on a busy host and on the
        container's own quota alike. v2: in its cgroup; v1: in the same path of the unified
        hierarchy mounted beside the controllers (``unified``, on hybrid hosts)."""
        path = self.find(container_id)
        if self.version == 2:
            pressure = path / "cpu.pressure"
        else:
            relative = path.relative_to(self.root)
            top = next((p for p in (self.root, *self.root.parents)
                        if p.name in ("cpu", "cpu,cpuacct")), self.root)
            pressure = top.parent / "unified" / self.root.relative_to(top) / relative / (
                "cpu.pressure")
            if not pressure.exists():
                raise ActuatorUnavailable(container_id, "no unified hierarchy with cpu.pressure")
        for line in self._read_file(container_id, pressure).splitlines():
            kind, _, fields = line.partition(" ")
            if kind == "some":
                for field in fields.split():
                    key, _, value = field.partition("=")
                    if key == "total" and value.isdigit() and len(value) < 20:
                        return int(value) * 1000
        raise ActuatorError(container_id, "cpu.pressure has no 'some' total")

    def restore(self, container_id: str) -> LimitChange | None:
        try:
            change = super().restore(container_id)
        except ContainerGone:
            self._settle_parent(container_id)
            raise
        # On any other failure the container is still above the pod's quota: keep it lifted.
        self._settle_parent(container_id)
        return change

    def forget(self, container_id: str) -> None:
        super().forget(container_id)
        self._settle_parent(container_id)
        self._paths.pop(container_id, None)

    def restore_all(
        self, on_change: Callable[[LimitChange], None] | None = None
    ) -> dict[str, ActuatorError]:
        failed = super().restore_all(on_change)
        # Pods lifted for no container still changed (lifted by an earlier run, found in the
        # ledger, or left by a failure between the writes) go back too.
        for parent in [p for p in self._lifted if p not in self._parent_of.values()]:
            self._put_back(parent, parent.name)
        return failed

    def attach_ledger(self, ledger: Ledger) -> None:
        super().attach_ledger(ledger)
        for relative, held in ledger.lifted.items():
            self._lifted.setdefault(self.root / relative, held)

    def _relative(self, parent: Path) -> str:
        return parent.relative_to(self.root).as_posix()

    def _forget_lift(self, parent: Path) -> None:
        self._lifted.pop(parent, None)
        if self._ledger is not None:
            self._ledger.settle(self._relative(parent))

    def _settle_parent(self, container_id: str) -> None:
        """Put a lifted pod quota back once none of its containers is still changed (the
        restored ones are at most their owner's limits again, which the pod's quota holds)."""
        parent = self._parent_of.pop(container_id, None)
        if parent is None or parent in self._parent_of.values():
            return
        self._put_back(parent, container_id)

    def _put_back(self, parent: Path, who: str) -> None:
        held = self._lifted[parent]
        try:
            now = self._read_limit(who, parent)
            if now.quota_us is None:  # still as lifted: nobody else has set it since
                self._write_limit(who, parent, now, held)
                log.info("cgroup: put back the quota of %s (%s)", parent.name, held)
        except ContainerGone:
            pass  # the pod's cgroup is gone with its last container
        except ActuatorError as exc:
            log.warning("cgroup: could not put back the quota of %s (%s): %s", parent.name,
                        held, exc)
            return  # still recorded: the next restore (or the next run) tries again
        self._forget_lift(parent)
