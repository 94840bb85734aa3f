"""The original limits, kept on the node's disk so that they survive the agent.

The actuator records a container's limit *before* it first changes it (written atomically and
synced), and drops the record once it has put that limit back or the container is gone. A
restarted agent (after ``kill -9``, an OOM kill, a node reboot of the agent only) loads the file
and restores every recorded container first: it never mistakes a limit it wrote itself for its
owner's (issue 15: a container throttled to 0.4 core stayed there after a restart and a clean
stop). ``specon-agent restore`` does the same and exits, for an operator or a shutdown hook.

The file is the agent's own (a host folder only the agent mounts), yet read as untrusted: a
bounded size, a known shape, and a file that does not parse is kept aside (``.corrupt-<time>``)
and reported, never silently replaced."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from .base import CpuLimit

log = logging.getLogger(__name__)

VERSION = 1
#: A node runs at most a few hundred containers; a record is under 200 bytes.
MAX_BYTES = 4 << 20


class LedgerError(ValueError):
    """The ledger file cannot be read as a ledger."""


@dataclass(frozen=True, slots=True)
class Entry:
    original: CpuLimit
    #: namespace, pod, container: what the resize actuator needs to find the container again.
    where: tuple[str, str, str] | None = None


class Ledger:
    """``{container ID: the limit it had before this agent changed it}`` in one JSON file, and
    the pod cgroups whose quota the cgroup actuator lifted (``lifted``: a path relative to the
    actuator's root, with the pod's quota before), so that a restarted agent puts those back too."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[str, Entry] = {}
        self.lifted: dict[str, CpuLimit] = {}

    @classmethod
    def open(cls, path: Path) -> Ledger:
        """Load ``path`` (none yet: an empty ledger). A file that is not a ledger is moved aside
        with the reason logged, and the ledger starts empty."""
        ledger = cls(path)
        try:
            ledger.entries, ledger.lifted = _parse(path)
        except FileNotFoundError:
            pass
        except (OSError, LedgerError) as exc:
            aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            with contextlib.suppress(OSError):
                os.replace(path, aside)
            log.error("original limits file %s unusable (%s): kept as %s; limits this agent "
                      "changed before cannot be restored automatically", path, exc, aside.name)
        return ledger

    def put(self, cid: str, original: CpuLimit,
            where: tuple[str, str, str] | None = None) -> None:
        self.entries[cid] = Entry(original, where)
        self._save()

    def drop(self, cid: str) -> None:
        if self.entries.pop(cid, None) is not None:
            self._save()

    def lift(self, relative: str, original: CpuLimit) -> None:
        """A pod cgroup (``relative`` to the actuator's root) is about to be lifted from
        ``original``: kept before the write, as a container's original is."""
        self.lifted[relative] = original
        self._save()

    def settle(self, relative: str) -> None:
        """The pod cgroup's quota is back (or the cgroup is gone)."""
        if self.lifted.pop(relative, None) is not None:
            self._save()

    def _save(self) -> None:
        doc: dict[str, object] = {"version": VERSION, "originals": {
            cid: {"quota_us": e.original.quota_us, "period_us": e.original.period_us,
                  "where": list(e.where) if e.where else None}
            for cid, e in sorted(self.entries.items())}}
        if self.lifted:  # absent when empty: a file an older agent reads the same
            doc["lifted"] = {rel: {"quota_us": lim.quota_us, "period_us": lim.period_us}
                             for rel, lim in sorted(self.lifted.items())}
        data = json.dumps(doc, indent=1).encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        with contextlib.suppress(OSError):  # the rename itself, durable
            dfd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)


def _limit(name: str, rec: object) -> CpuLimit:
    if not isinstance(rec, dict):
        raise LedgerError(f"bad record for {name!r}")
    quota, period = rec.get("quota_us"), rec.get("period_us")
    if not (quota is None or (type(quota) is int and quota > 0)):
        raise LedgerError(f"{name}: quota_us {quota!r}")
    if not (type(period) is int and 1_000 <= period <= 1_000_000):
        raise LedgerError(f"{name}: period_us {period!r}")
    return CpuLimit(quota, period)


def _relative_cgroup(rel: object) -> str:
    """A lifted pod's path: relative, downward only, a few plain names (the file is read as
    untrusted: no path in it may lead outside the actuator's root)."""
    parts = rel.split("/") if isinstance(rel, str) and len(rel) <= 1024 else []
    if not parts or len(parts) > 8 or any(
            p in ("", ".", "..") or len(p) > 255 or "\0" in p for p in parts):
        raise LedgerError(f"lifted: not a relative cgroup path: {str(rel)[:64]!r}")
    return "/".join(parts)


def _parse(path: Path) -> tuple[dict[str, Entry], dict[str, CpuLimit]]:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LedgerError("not a regular file")
        if st.st_size > MAX_BYTES:
            raise LedgerError(f"{st.st_size} bytes, over {MAX_BYTES}")
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise LedgerError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION or not isinstance(
            doc.get("originals"), dict):
        raise LedgerError(f"not a version {VERSION} ledger")
    out: dict[str, Entry] = {}
    for cid, rec in doc["originals"].items():
        if not (isinstance(cid, str) and 0 < len(cid) <= 256 and isinstance(rec, dict)):
            raise LedgerError(f"bad record for {str(cid)[:64]!r}")
        limit, where = _limit(cid[:12], rec), rec.get("where")
        if where is not None and not (isinstance(where, list) and len(where) == 3 and all(
                isinstance(w, str) and 0 < len(w) <= 253 for w in where)):
            raise LedgerError(f"{cid[:12]}: where {where!r}")
        out[cid] = Entry(limit, (where[0], where[1], where[2]) if where else None)
    lifted = doc.get("lifted", {})
    if not isinstance(lifted, dict):
        raise LedgerError("lifted: not a mapping")
    pods = {_relative_cgroup(rel): _limit(str(rel)[:64], rec) for rel, rec in lifted.items()}
    return out, pods
