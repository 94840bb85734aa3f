"""Writes to the job's volume, which may be full, read-only or broken: nothing here may stop the
job (docs/training-contract.md). Each write either happens whole or leaves nothing behind (a
temporary file is removed, an appended line that did not fit is cut off again), and the
failure is raised for the caller to report; :func:`warn` says so on stderr.

Stdlib only, like the rest of the SDK."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable
from pathlib import Path

#: Prefix of the temporary files writes go through (removed when a write fails, and on resume).
TMP_PREFIX = ".tmp-"


def warn(message: str) -> None:
    """One line on stderr, ``specon: <message>``; never raises (stderr may be gone too)."""
    with contextlib.suppress(Exception):
        print(f"specon: {message}", file=sys.stderr, flush=True)


def why(exc: BaseException) -> str:
    """A failure in a few words: ``OSError: [Errno 28] No space left on device``."""
    return f"{type(exc).__name__}: {exc}"


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary name beside ``path``, fsync, rename over ``path`` and fsync
    the folder. On failure the temporary file is removed and the error raised: ``path`` is the
    old file or the new one, never a part."""
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def remove_partials(directory: Path, prefix: str, suffixes: Iterable[str]) -> list[str]:
    """Remove what an interrupted or failed write left in a checkpoint folder: temporary files
    and data files (``<prefix>…<suffix>``) whose manifest (``.json``) does not exist. Returns
    the names removed; a file that cannot be removed (read-only volume) is left alone. Raises
    OSError when the folder cannot be listed."""
    with os.scandir(directory) as it:
        names = {entry.name for entry in it}
    suffixes = tuple(suffixes)
    gone = []
    for name in sorted(names):
        stem, dot, suffix = name.rpartition(".")
        orphan = (name.startswith(prefix) and dot and f".{suffix}" in suffixes
                  and f"{stem}.json" not in names)
        if name.startswith(TMP_PREFIX) or orphan:
            try:
                (directory / name).unlink()
            except OSError:
                continue
            gone.append(name)
    return gone


class AppendFile:
    """A file lines are appended to, one ``os.write`` per line on an ``O_APPEND`` descriptor
    (no buffer that a failed flush would leave behind to be written again later). A line that
    does not fit is cut off again, so the file only ever holds whole lines; the failure is
    raised. A file that could not be opened is opened again at the next line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def append(self, data: bytes) -> None:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                               0o644)
        fd = self._fd
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)  # no torn line for the reader
            raise

    def sync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
