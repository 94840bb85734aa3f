"""Incremental reading of log files: follows one path across rotation and truncation, and
unwraps the container engines' log framings (Docker's json-file, the CRI format) into text lines.

Nothing here re-reads a file: each poll reads only what was appended since the last one, a file
found already large is read from its last ``tail_bytes`` only, and one poll reads at most
``max_read`` bytes (the rest waits for the next poll).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from .safefs import ConfinementError, open_beneath

#: A line longer than this without a newline is dropped (counted), so a runaway writer cannot
#: grow the agent's memory.
MAX_LINE = 1 << 20

#: How many of the last-read bytes are kept to recognise the file at the next poll: a file
#: truncated and rewritten past our offset between two polls has the same inode and a larger
#: size, so only its content shows that it is no longer the file we read.
CHECK_BYTES = 64


def _open_regular(path: Path) -> int:
    """An fd for ``path`` (symlinks followed: no root to confine it to), opened without
    blocking (a FIFO would hang the loop) and only when it is a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfinementError(errno.EINVAL, f"{str(path)!r} is not a regular file")
    return fd


@dataclass
class TailStats:
    rotations: int = 0
    truncations: int = 0
    bytes_read: int = 0
    dropped_lines: int = 0
    refused: int = 0  # opens refused by the confinement (outside the root, symlink, not a file)


class FileTail:
    """Complete lines appended to ``path`` since the last call to :meth:`read_lines`.

    Rotation (the path now names another file: Docker's json-file and the kubelet rename the
    old one) is detected by inode: the old file is read to its end before the new one is
    opened. Truncation in place starts again from the beginning: seen as a size below our
    position, or, when the file grew back past our position before this poll, as bytes before
    our position that differ from the last ones we read.
    """

    def __init__(
        self,
        path: Path | str,
        tail_bytes: int | None = 1 << 20,
        max_read: int = 4 << 20,
        stats: TailStats | None = None,
        root: Path | None = None,
    ) -> None:
        self.path = Path(path)
        #: When set, the path came from a pod: it is opened beneath this root, no symlink
        #: followed, regular files only (specon_agent.safefs); a refusal is counted.
        self.root = root
        # Only for the first file: after a rotation the new file is read from its start.
        self._tail_bytes = tail_bytes
        self.max_read = max_read
        self.stats = stats if stats is not None else TailStats()
        self._file: BinaryIO | None = None
        self._ino: tuple[int, int] | None = None
        self._partial = b""
        self._skip_to_newline = False
        self._last = b""  # the last CHECK_BYTES bytes read, ending at the file position
        #: Set when a file was opened at ``tail_bytes`` before its end: the first lines read
        #: may continue a line (a run of partial records) whose start was not read. The reader
        #: clears it once it has told its parser to skip to the next update.
        self.landed_mid_file = False

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _open(self) -> bool:
        try:
            if self.root is None:
                f = os.fdopen(_open_regular(self.path), "rb")
            else:
                rel = self.path.relative_to(self.root)
                f = os.fdopen(open_beneath(self.root, str(rel)), "rb")
        except (ConfinementError, ValueError):
            self.stats.refused += 1
            return False
        except OSError:
            return False
        st = os.fstat(f.fileno())
        self._file = f
        self._ino = (st.st_dev, st.st_ino)
        self._partial = b""
        self._last = b""
        if self._tail_bytes is not None and st.st_size > self._tail_bytes:
            f.seek(st.st_size - self._tail_bytes)
            self._skip_to_newline = True  # we landed inside a line
            self.landed_mid_file = True
        self._tail_bytes = None
        return True

    def _drain(self, budget: int) -> bytes:
        assert self._file is not None
        chunk = self._file.read(budget)
        self.stats.bytes_read += len(chunk)
        self._last = (self._last + chunk)[-CHECK_BYTES:]
        return chunk

    def _truncated(self) -> bool:
        assert self._file is not None
        pos = self._file.tell()
        if os.fstat(self._file.fileno()).st_size < pos:
            return True
        if not self._last:
            return False
        try:
            seen = os.pread(self._file.fileno(), len(self._last), pos - len(self._last))
        except OSError:
            return True
        return seen != self._last

    def read_lines(self) -> list[bytes]:
        if self._file is None and not self._open():
            return []
        assert self._file is not None
        if self._truncated():
            self.stats.truncations += 1
            self._file.seek(0)
            self._partial = b""
            self._last = b""
            self._skip_to_newline = False
        data = self._drain(self.max_read)
        if len(data) < self.max_read and self._rotated():
            # The old file is complete: take its rest, then switch to the new one.
            data += self._drain(self.max_read - len(data))
            lines = self._split(data, final=True)
            self.close()
            self.stats.rotations += 1
            if self._open():
                lines += self._split(self._drain(self.max_read), final=False)
            return lines
        return self._split(data, final=False)

    def _rotated(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            return False  # gone, not replaced (yet): keep reading what we have
        return (st.st_dev, st.st_ino) != self._ino

    def _split(self, data: bytes, final: bool) -> list[bytes]:
        if not data and not final:
            return []
        buf = self._partial + data
        if self._skip_to_newline:
            cut = buf.find(b"\n")
            if cut < 0:
                self._partial = b"" if len(buf) > MAX_LINE else buf
                return []
            buf = buf[cut + 1 :]
            self._skip_to_newline = False
        parts = buf.split(b"\n")
        rest = parts.pop()
        if final and rest:
            parts.append(rest)  # an unterminated last line of a rotated file is still a line
            rest = b""
        if len(rest) > MAX_LINE:
            self.stats.dropped_lines += 1
            rest = b""
            self._skip_to_newline = True
        self._partial = rest
        return parts


#: The streams a framed record may name; any other is invalid framing (a hostile or broken
#: writer cannot make the agent keep state per invented stream).
STREAMS = ("stdout", "stderr")


@dataclass
class Decoded:
    """What framed log lines carried, in file order: ``pieces`` of (stream, text), a text
    ending in ``"\n"`` where the engine's record ended a line. The content of a partial record
    (a CRI ``P`` record, a json-file record without its newline) is passed on as it arrives,
    never held until its line ends: a progress bar redrawn with ``\r`` for a whole epoch is one
    line of megabytes, and every update in it is wanted now. The parser
    (:class:`specon.logparse.LogParser`) keeps the one unfinished update per stream, bounded.
    CRI content stays bytes (the engine cuts pieces at any byte, inside a UTF-8 character too)
    and is decoded per stream by the parser."""

    pieces: list[tuple[str, bytes | str]] = field(default_factory=list)
    errors: int = 0

    @property
    def lines(self) -> list[str]:
        """The complete lines among the pieces (a piece continuing an earlier batch's
        partial record comes out as its own rest): for tests and offline use."""
        out: list[str] = []
        open_: dict[str, str] = {}
        for stream, piece in self.pieces:
            text = piece.decode("utf-8", "replace") if isinstance(piece, bytes) else piece
            joined = open_.pop(stream, "") + text
            if joined.endswith("\n"):
                out.append(joined[:-1])
            else:
                open_[stream] = joined
        return out


class DockerJsonDecoder:
    """Docker's json-file driver: ``{"log": "text\\n", "stream": "stdout", "time": "..."}``.
    The engine splits lines longer than 16 KiB into records without the trailing newline."""

    def feed(self, raw: list[bytes]) -> Decoded:
        out = Decoded()
        for line in raw:
            try:
                rec = json.loads(line)
                text = rec["log"]
                stream = rec.get("stream", "stdout")
                if not isinstance(text, str) or stream not in STREAMS:
                    raise TypeError
            except (ValueError, KeyError, TypeError, AttributeError):
                out.errors += 1
                continue
            if text.endswith("\r\n"):
                text = text[:-2] + "\n"
            out.pieces.append((stream, text))
        return out


class CriDecoder:
    """The CRI log format of ``/var/log/pods``: ``<RFC3339Nano> <stream> <P|F> <content>``, as
    containerd writes it: content is cut into ``P`` records of ``max_container_log_line_size``
    bytes (16 KiB by default) at any byte, and the ``F`` record ends the line (its ``\n`` and a
    ``\r`` before it are not in the content)."""

    def feed(self, raw: list[bytes]) -> Decoded:
        out = Decoded()
        for line in raw:
            parts = line.split(b" ", 3)
            if len(parts) < 3 or parts[2] not in (b"P", b"F"):
                out.errors += 1
                continue
            stream = parts[1].decode("ascii", "replace")
            if stream not in STREAMS:
                out.errors += 1
                continue
            content = parts[3] if len(parts) == 4 else b""
            out.pieces.append((stream, content + b"\n" if parts[2] == b"F" else content))
        return out


class PlainDecoder:
    """A file written directly by the job (the SDK's JSON-lines progress file)."""

    def feed(self, raw: list[bytes]) -> Decoded:
        return Decoded(pieces=[("stdout", line + b"\n") for line in raw])


def decoder_for(kind: str) -> DockerJsonDecoder | CriDecoder | PlainDecoder:
    if kind == "docker-json":
        return DockerJsonDecoder()
    if kind == "cri":
        return CriDecoder()
    if kind in ("plain", "csv"):
        return PlainDecoder()
    raise ValueError(f"unknown log format {kind!r}")


def newest_cri_log(container_dir: Path) -> Path | None:
    """The current log of a container under ``/var/log/pods/<ns>_<pod>_<uid>/<container>/``:
    ``<restart count>.log``, the highest count (a restarted container writes a new file)."""
    best: tuple[int, Path] | None = None
    try:
        entries = list(container_dir.iterdir())
    except OSError:
        return None
    for p in entries:
        stem, dot, ext = p.name.partition(".")
        if ext == "log" and dot and stem.isdigit() and (best is None or int(stem) > best[0]):
            best = (int(stem), p)
    return None if best is None else best[1]
