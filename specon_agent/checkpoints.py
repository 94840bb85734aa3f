"""The heartbeat's checkpoint proof (docs/training-contract.md §4), with the hashing off the
control loop.

A job's last checkpoint is reported once the one its ``saved.json`` names verifies against its
manifest: the data file's size and SHA-256. Hashing a 1 GiB checkpoint took about 10 s of the
control loop, and touching the file forced it again. So the hash is computed by a worker
thread (:class:`Hasher`) and cached by the file's (device, inode, size, mtime_ns); the loop
waits for it at most :data:`HASH_BUDGET_S` per pass over all jobs, and a checkpoint whose hash
is not done yet counts as not yet verified (the next heartbeats ask again). Every file is
opened confined (:mod:`specon_agent.safefs`) by the loop; the worker only reads an fd it was
handed.
"""

from __future__ import annotations

import collections
import concurrent.futures
import errno
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from specon.sdk import SAVED_FILE
from specon.wire import SavedCheckpoint

from .discovery import Target
from .metrics import AgentMetrics
from .safefs import (
    Cancelled,
    ConfinementError,
    check_size,
    open_beneath,
    read_beneath,
    sha256_fd,
)

log = logging.getLogger(__name__)

#: saved.json, a manifest, request.json: small JSON files; a bigger one is refused unread.
SMALL_FILE = 1 << 16
#: The longest the loop waits for checkpoint hashes in one pass, over all jobs (seconds).
HASH_BUDGET_S = 0.5
#: Digests kept, by (device, inode, size, mtime_ns).
CACHE_SIZE = 256

FileKey = tuple[int, int, int, int]


def checkpoint_dirfd(target: Target) -> int:
    """An fd for the job's checkpoint folder: opened beneath the file root (no symlink, no
    ``..``) when the folder came from a pod's annotation; every file in it is then opened
    beneath that fd."""
    d, root = target.checkpoint_dir, target.file_root
    assert d is not None
    if root is None:
        return os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        rel = d.relative_to(root)
    except ValueError as exc:
        raise ConfinementError(errno.EXDEV, f"{d} is not beneath {root}") from exc
    if str(rel) == ".":
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return open_beneath(root, str(rel), os.O_RDONLY | os.O_DIRECTORY, regular=False)


@dataclass
class Proof:
    """What the agent last read of one job's checkpoint folder: saved.json and its manifest
    with the data file's stat, and the checkpoint they proved (None: not verified)."""

    seen: tuple[str, str, tuple[int, ...]] | None = None
    checkpoint: SavedCheckpoint | None = None


@dataclass
class _Task:
    key: FileKey
    future: concurrent.futures.Future[str]
    cancel: threading.Event = field(default_factory=threading.Event)


class Hasher:
    """SHA-256 of checkpoint data files on one worker thread, cached by (device, inode, size,
    mtime_ns). Called from the control loop only. :meth:`new_pass` starts a pass whose waits
    together last at most ``budget_s``."""

    def __init__(self, budget_s: float = HASH_BUDGET_S, cache_size: int = CACHE_SIZE) -> None:
        self.budget_s = budget_s
        self._cache: collections.OrderedDict[FileKey, str] = collections.OrderedDict()
        self._cache_size = cache_size
        self._pending: dict[str, _Task] = {}  # by job
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._deadline = 0.0
        self.hashed = 0  # files hashed to their end (not served from the cache)

    def new_pass(self) -> None:
        self._deadline = time.monotonic() + self.budget_s

    def digest(self, job: str, fd: int, rel: str, declared: int) -> str | None:
        """The digest of the open file ``fd`` (the caller keeps it), or None while it is being
        hashed; an ``OSError`` (a :class:`ConfinementError` for a file that grew or shrank
        while hashed) when hashing failed."""
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        task = self._pending.get(job)
        if key in self._cache:
            self.forget(job)
            self._cache.move_to_end(key)
            return self._cache[key]
        if task is None or task.key != key:
            self.forget(job)  # the file changed: the old hash is not wanted any more
            task = self._submit(key, os.dup(fd), rel, declared)
            self._pending[job] = task
        try:
            digest = task.future.result(timeout=max(0.0, self._deadline - time.monotonic()))
        except concurrent.futures.TimeoutError:
            return None  # not verified yet: asked again at the next pass
        finally:
            if task.future.done():
                self._pending.pop(job, None)
        self._cache[key] = digest
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return digest

    def _submit(self, key: FileKey, fd: int, rel: str, declared: int) -> _Task:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="checkpoint-hash")
        cancel = threading.Event()

        def run() -> str:
            try:
                digest = sha256_fd(fd, rel, declared, cancel.is_set)
            finally:
                os.close(fd)
            self.hashed += 1
            return digest

        try:
            future = self._pool.submit(run)
        except BaseException:
            os.close(fd)
            raise
        return _Task(key, future, cancel)

    def forget(self, job: str) -> None:
        """Give up the job's hash in progress, if any."""
        task = self._pending.pop(job, None)
        if task is not None:
            task.cancel.set()

    def close(self) -> None:
        for job in list(self._pending):
            self.forget(job)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


class CheckpointProofs:
    """Reads each job's ``saved.json``, manifest and data file, and says which checkpoint
    verified; counts and logs the outcomes once per distinct content."""

    def __init__(self, metrics: AgentMetrics, max_bytes: int,
                 budget_s: float = HASH_BUDGET_S) -> None:
        self.metrics = metrics
        self.max_bytes = max_bytes
        self.hasher = Hasher(budget_s)

    def report(self, job: str, target: Target, proof: Proof) -> SavedCheckpoint | None:
        """The job's last checkpoint as its ``saved.json`` names it, once the named checkpoint
        verifies against its manifest; None otherwise, and while its data is being hashed. The
        data is hashed again only when its file changed (device, inode, size, mtime)."""
        if target.checkpoint_dir is None:
            return None
        try:
            dfd = checkpoint_dirfd(target)
        except ConfinementError as exc:
            self._refused(target, proof, exc)
            return None
        except OSError:
            proof.seen, proof.checkpoint = None, None
            return None
        try:
            return self._read(job, target, proof, dfd)
        except ConfinementError as exc:
            self._refused(target, proof, exc)
            return None
        finally:
            os.close(dfd)

    def _refused(self, target: Target, proof: Proof, exc: ConfinementError) -> None:
        key = ("refused", str(exc), ())
        if proof.seen != key:  # once per distinct refusal, not every heartbeat
            proof.seen, proof.checkpoint = key, None
            self.metrics.confinement_refusals.labels("checkpoint").inc()
            self.metrics.checkpoints.labels("rejected").inc()
            log.warning("%s: checkpoint not reported, refused: %s", target.name, exc)

    def _read(self, job: str, target: Target, proof: Proof, dfd: int) -> SavedCheckpoint | None:
        try:
            text = read_beneath(dfd, SAVED_FILE, SMALL_FILE).decode("utf-8", "replace")
        except ConfinementError:
            raise
        except OSError:
            proof.seen, proof.checkpoint = None, None
            return None
        try:
            saved = json.loads(text)
            name = str(saved["checkpoint"])
            manifest = read_beneath(dfd, f"{name}.json", SMALL_FILE).decode("utf-8", "replace")
            meta = json.loads(manifest)
            data_name, declared = str(meta["file"]), int(meta["bytes"])
            expected = str(meta["sha256"])
            if "/" in data_name or data_name in (".", ".."):
                raise ConfinementError(errno.EXDEV, f"manifest names {data_name!r}, not a file "
                                       "of the checkpoint folder")
            fd = open_beneath(dfd, data_name)
        except ConfinementError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if proof.seen != (text, "", ()):
                proof.seen, proof.checkpoint = (text, "", ()), None
                log.warning("%s: %s names no readable checkpoint (%s)", target.name,
                            SAVED_FILE, exc)
                self.metrics.checkpoints.labels("unreadable").inc()
            return None
        try:
            st = os.fstat(fd)
            seen = (text, manifest, (st.st_ino, st.st_mtime_ns, st.st_size))
            if seen == proof.seen:
                return proof.checkpoint
            proof.checkpoint = None
            check_size(fd, data_name, declared, self.max_bytes)
            problem: str | None = None
            try:
                digest = self.hasher.digest(job, fd, data_name, declared)
            except ConfinementError:
                raise
            except (OSError, Cancelled) as exc:
                digest, problem = "", f"data file unreadable ({type(exc).__name__})"
            if digest is None:
                return None  # being hashed: not verified yet
        finally:
            os.close(fd)
        proof.seen = seen
        return self._judge(target, proof, saved, name, digest, expected, problem)

    def _judge(self, target: Target, proof: Proof, saved: dict[str, Any], name: str,
               sha256: str, expected: str, problem: str | None) -> SavedCheckpoint | None:
        if problem is None and sha256 != expected:
            problem = "checksum mismatch"
        if problem is None and saved.get("sha256") != sha256:
            problem = "saved.json and the manifest disagree on the checksum"
        if problem is None:
            try:
                proof.checkpoint = SavedCheckpoint(
                    request=saved.get("request"), name=name, step=saved["step"], sha256=sha256,
                    time=saved["time"])
            except (KeyError, ValueError) as exc:
                problem = f"bad fields in {SAVED_FILE} ({exc})"
        if problem is not None or proof.checkpoint is None:
            log.warning("%s: checkpoint %s not reported: %s", target.name, name, problem)
            self.metrics.checkpoints.labels("rejected").inc()
            return None
        self.metrics.checkpoints.labels("verified").inc()
        log.info("%s: checkpoint %s (step %d, request %s) verified", target.name, name,
                 proof.checkpoint.step, proof.checkpoint.request)
        return proof.checkpoint
