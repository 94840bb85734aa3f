"""Confined file access for paths that come from pods (annotations, labels).

Every such path is opened beneath a root the operator configured, with no symlink followed at
any component and no ``..`` leaving the root: ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)``
where the kernel has it, else one ``O_NOFOLLOW`` open per component from a directory fd. Files
are opened ``O_NONBLOCK`` (a FIFO cannot hang the agent's loop) and must be regular files
(``fstat``), so neither ``/dev/zero`` nor a FIFO nor a directory is ever read. A write
creates an unguessable temporary name exclusively (``O_EXCL | O_NOFOLLOW | O_NONBLOCK``) and
renames it into place, so nothing the pod planted in its folder is ever opened for writing.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path, PurePosixPath

_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = 437  # the same number on x86_64 and aarch64


class ConfinementError(OSError):
    """A pod-supplied path that escapes its root, crosses a symlink, or is not a regular file."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc: ctypes.CDLL | None
try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - no libc to call
    _libc = None
_have_openat2: bool | None = None  # unknown until first tried


def relative_parts(rel: str | PurePosixPath) -> list[str]:
    """The components of a pod-supplied path, taken as relative to its root; ``..`` refused."""
    parts = [p for p in PurePosixPath(str(rel)).parts if p not in ("/", ".", "")]
    if any(p == ".." for p in parts):
        raise ConfinementError(errno.EXDEV, f"path {str(rel)!r} leaves its root")
    if not parts:
        raise ConfinementError(errno.EINVAL, "empty path")
    return parts


def _openat2(dirfd: int, rel: str, flags: int, mode: int) -> int:
    global _have_openat2
    assert _libc is not None
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0,
                   _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
    fd = int(_libc.syscall(_SYS_OPENAT2, dirfd, rel.encode(), ctypes.byref(how),
                           ctypes.sizeof(how)))
    if fd >= 0:
        return fd
    err = ctypes.get_errno()
    if err == errno.ENOSYS:
        _have_openat2 = False
        raise NotImplementedError
    if err in (errno.ELOOP, errno.EXDEV):
        raise ConfinementError(err, f"{rel!r}: a symlink or a way out of the root")
    raise OSError(err, os.strerror(err), rel)


def _open_walk(dirfd: int, parts: list[str], flags: int, mode: int) -> int:
    cur = os.dup(dirfd)
    try:
        for name in parts[:-1]:
            try:
                nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=cur)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ConfinementError(e.errno, f"{name!r}: a symlink or not a folder") from e
                raise
            os.close(cur)
            cur = nxt
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=cur)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise ConfinementError(e.errno, f"{parts[-1]!r} is a symlink") from e
            raise
    finally:
        os.close(cur)


def _rootfd(root: Path | str | int) -> int:
    """An fd for the root: a path is opened (a folder), an fd (already confined) duplicated."""
    if isinstance(root, int):
        return os.dup(root)
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_beneath(root: Path | str | int, rel: str | PurePosixPath, flags: int = os.O_RDONLY,
                 mode: int = 0o644, regular: bool = True) -> int:
    """An fd for ``root/rel`` opened with ``flags | O_NONBLOCK``, confined beneath ``root``.

    Raises :class:`ConfinementError` for ``..``, a symlink anywhere below the root, or (with
    ``regular``) anything but a regular file; other ``OSError`` (missing file) pass through."""
    parts = relative_parts(rel)
    flags |= os.O_NONBLOCK
    rootfd = _rootfd(root)
    try:
        fd = -1
        if _libc is not None and _have_openat2 is not False:
            try:
                fd = _openat2(rootfd, "/".join(parts), flags, mode)
            except NotImplementedError:
                fd = -1
        if fd < 0:
            fd = _open_walk(rootfd, parts, flags, mode)
    finally:
        os.close(rootfd)
    if regular:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise ConfinementError(errno.EINVAL, f"{'/'.join(parts)!r} is not a regular file")
    return fd


def read_beneath(root: Path | str | int, rel: str | PurePosixPath, limit: int) -> bytes:
    """At most ``limit`` bytes of a confined regular file; a larger file is refused."""
    fd = open_beneath(root, rel)
    try:
        if os.fstat(fd).st_size > limit:
            raise ConfinementError(errno.EFBIG, f"{str(rel)!r} is over {limit} bytes")
        chunks, n = [], 0
        while n <= limit:
            b = os.read(fd, min(1 << 16, limit + 1 - n))
            if not b:
                break
            chunks.append(b)
            n += len(b)
        if n > limit:
            raise ConfinementError(errno.EFBIG, f"{str(rel)!r} is over {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_beneath(root: Path | str | int, rel: str | PurePosixPath, data: bytes,
                  mode: int = 0o644) -> None:
    """Write ``data`` to ``root/rel`` atomically (temp file + rename in the same confined
    folder); neither the folder nor the file may be reached through a symlink or ``..``.

    The folder is the pod's own: whatever it planted there (a FIFO, a symlink, a file) is
    never opened. The temporary name is unguessable and created with ``O_EXCL | O_NOFOLLOW |
    O_NONBLOCK`` (a name that exists fails instead of being opened); the rename replaces
    whatever ``rel`` was, without opening it."""
    parts = relative_parts(rel)
    name = parts[-1]
    dirparts = parts[:-1]
    rootfd = _rootfd(root)
    try:
        dfd = (_open_walk(rootfd, [*dirparts, "."], os.O_RDONLY | os.O_DIRECTORY, 0)
               if dirparts else os.dup(rootfd))
    finally:
        os.close(rootfd)
    tmp = f".{name}.tmp-{secrets.token_hex(16)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:  # from here on the temporary file is ours: removed if anything fails
            try:
                os.fchmod(fd, mode)  # exactly this mode, whatever the agent's umask
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)


class Cancelled(Exception):
    """A hash given up because its result is no longer wanted (the file changed meanwhile)."""


def check_size(fd: int, rel: str, declared: int, cap: int) -> None:
    """Refuse a data file over ``cap`` or whose size is not ``declared``, before reading it."""
    if declared > cap:
        raise ConfinementError(errno.EFBIG, f"{rel!r}: declared {declared} bytes, over {cap}")
    size = os.fstat(fd).st_size
    if size != declared:
        raise ConfinementError(errno.EINVAL, f"{rel!r} has {size} bytes, manifest says {declared}")


def sha256_fd(fd: int, rel: str, declared: int,
              cancelled: Callable[[], bool] | None = None) -> str:
    """The SHA-256 of an open regular file, read from its start in 1 MiB chunks (memory stays
    flat whatever the size); a file that grows past ``declared`` or ends before it is refused.
    ``cancelled`` is asked between chunks: :class:`Cancelled` once it says so."""
    h, n = hashlib.sha256(), 0
    while True:
        if cancelled is not None and cancelled():
            raise Cancelled(rel)
        b = os.pread(fd, 1 << 20, n)
        if not b:
            break
        n += len(b)
        if n > declared:
            raise ConfinementError(errno.EFBIG, f"{rel!r} grew past {declared} bytes")
        h.update(b)
    if n != declared:
        raise ConfinementError(errno.EINVAL, f"{rel!r} shrank to {n} bytes")
    return h.hexdigest()


def sha256_beneath(root: Path | str | int, rel: str, declared: int, cap: int) -> str:
    """The SHA-256 of a confined regular file, hashed in 1 MiB chunks (memory stays flat
    whatever the size); a file whose size is not ``declared``, or over ``cap``, is refused
    before any byte is hashed, and one that grows while being read is refused too."""
    if declared > cap:
        raise ConfinementError(errno.EFBIG, f"{rel!r}: declared {declared} bytes, over {cap}")
    fd = open_beneath(root, rel)
    try:
        check_size(fd, rel, declared, cap)
        return sha256_fd(fd, rel, declared)
    finally:
        os.close(fd)
