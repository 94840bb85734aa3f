"""Safe checkpoints: atomic write, checksum manifest, verified rotation, resume from the last
good one, and save-then-exit-143 on SIGTERM or on request. See docs/training-contract.md.

The volume may be full, read-only or broken: a save that fails is reported (stderr and a
``checkpoint-failed`` event) and removes what it wrote, and the job goes on; ``resume()`` takes
the newest checkpoint it can read, else starts from scratch and says why."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from specon import names
from specon.sdk import plaindata, tensorfile
from specon.sdk.progress import Reporter, default_reporter
from specon.sdk.threads import ThreadHint
from specon.sdk.volume import atomic_write, remove_partials, warn, why

#: Directory where checkpoints go (on the shared volume). Unset: checkpointing is off.
ENV_CHECKPOINT_DIR = names.ENV_CHECKPOINT_DIR
#: Optional: save every N completed steps as well (0 or unset: only on request or SIGTERM).
ENV_CHECKPOINT_EVERY = names.ENV_CHECKPOINT_EVERY
#: The file the agent or manager writes to ask for a checkpoint ({"id": ..., "exit": bool}).
REQUEST_FILE = names.REQUEST_FILE
#: The file the job writes after each verified save (the "saved" signal).
SAVED_FILE = names.SAVED_FILE
#: Exit status of a job that saved and stopped so it can be moved (128 + SIGTERM).
EXIT_STOPPED = 143
#: Exit status after a request with ``"done": true`` (the job is finished, e.g. its target
#: loss is reached): a completed job, not one to restart.
EXIT_DONE = 0
MANIFEST_FORMAT = "specon-checkpoint/v1"
#: ``__metadata__["format"]`` of a checkpoint's safetensors file; ``["state"]`` is the state
#: as plain data (specon.sdk.plaindata), its tensors named there and stored as the file's own.
STATE_FORMAT = "specon-state/v1"
#: Data files of older versions (pickle, torch.save): never loaded; cleaned up as orphans.
LEGACY_SUFFIXES = (".pkl", ".pt")
_PREFIX = "ckpt-"


@dataclass(frozen=True)
class Saved:
    """One verified checkpoint on disk."""

    name: str
    step: int
    path: Path
    bytes: int
    sha256: str
    seconds: float


@dataclass(frozen=True)
class Restored:
    """What `resume()` took: the state, its step, and the newer checkpoints it rejected."""

    state: Any
    step: int
    name: str
    seconds: float
    rejected: tuple[tuple[str, str], ...] = field(default=())

    def describe(self) -> str:
        text = f"resumed from {self.name} (step {self.step})"
        if self.rejected:
            why = "; ".join(f"{n}: {r}" for n, r in self.rejected)
            text += f", rejected newer checkpoints: {why}"
        return text


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def verify_checkpoint(directory: Path, name: str) -> tuple[str | None, str, bytes]:
    """Check checkpoint ``name`` in ``directory`` against its manifest (size and SHA-256),
    without loading it: (problem or None, the verified SHA-256, the data). What a job does
    before resuming and what a requester does before acting on ``saved.json``."""
    problem, digest, data, _ = _verify(directory, name)
    return problem, digest, data


def _verify(directory: Path, name: str) -> tuple[str | None, str, bytes, str]:
    """:func:`verify_checkpoint`, and the data file's name (empty when unknown)."""
    try:
        manifest = json.loads((directory / f"{name}.json").read_text())
        data_path = directory / str(manifest["file"])
        expected = str(manifest["sha256"])
        size = int(manifest["bytes"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable manifest ({type(exc).__name__})", "", b"", ""
    if data_path.parent != directory:
        return "manifest names a file outside the checkpoint directory", "", b"", ""
    file = data_path.name
    try:
        data = data_path.read_bytes()
    except OSError as exc:
        return f"missing data file ({type(exc).__name__})", "", b"", file
    if len(data) != size:
        return f"size mismatch ({len(data)} bytes, manifest says {size})", "", b"", file
    if _sha256(data) != expected:
        return "checksum mismatch", "", b"", file
    return None, expected, data, file


class UnsafeCheckpoint(ValueError):
    """A checkpoint file that is not tensors and plain data in the safetensors format (a
    pickle, a torch.save file, a malformed or hostile file): refused, never unpickled."""


def _legacy(data: bytes) -> str | None:
    """What older format ``data`` looks like, if it is one: these are pickles and are refused."""
    if data[:4] == b"PK\x03\x04":
        return "a torch.save (zip and pickle) file"
    if data[:1] == b"\x80":
        return "a pickle"
    if len(data) > 9 and data[8:9] == b"\x80" and int.from_bytes(data[:8], "big") < len(data):
        return "an older SpeCon checkpoint (pickle and torch.save)"
    return None


class Checkpointer:
    """Checkpoints of plain data (None, bool, int, float, str, bytes, list, tuple, set, dict),
    stored in the safetensors format (never pickle).

    Call `resume()` once at start, then `step_end(step, state)` after every iteration: it
    saves when asked (request file, SIGTERM, or every N steps) and, after SIGTERM or an
    exit request, exits with status 143 once the checkpoint is verified."""

    kind = "plain"
    suffix = ".safetensors"

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        keep: int = 2,
        every: int | None = None,
        reporter: Reporter | None = None,
        handle_sigterm: bool = True,
        on_threads: Callable[[int], None] | None = None,
        follow_threads: bool = True,
    ) -> None:
        """``on_threads``: called with the agent's thread hint when it changes (§8);
        ``follow_threads=False`` ignores the hint."""
        if directory is None:
            directory = os.environ.get(ENV_CHECKPOINT_DIR) or None
        if every is None:
            every = int(os.environ.get(ENV_CHECKPOINT_EVERY) or 0)
        self.directory = Path(directory) if directory else None
        self.keep = max(2, keep)
        self.every = max(0, every)
        self._reporter = reporter
        self._stop = threading.Event()
        self._stop_reason = ""
        self._last: Saved | None = None
        #: The newest verified checkpoint this process saved or resumed from (its name).
        self._good: str | None = None
        self._handled_request: str | None = None
        self.thread_hint: ThreadHint | None = None
        if self.directory is not None and follow_threads:
            self.thread_hint = ThreadHint(self.directory, on_threads, reporter=reporter)
        if self.directory is not None:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                warn(f"cannot create the checkpoint folder {self.directory} ({why(exc)}); "
                     "saves fail until it can be, and the job goes on")
            self._handled_request = self._read_saved().get("request")
            if handle_sigterm and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, self._on_sigterm)

    # -- hooks a subclass overrides -------------------------------------------------------
    def serialize(self, state: Any) -> bytes:
        """``state`` as a safetensors file: its tensors (what :meth:`tensor_out` takes) as the
        file's tensors, the rest as plain data in the header's metadata. TypeError for a
        value that is neither (docs/training-contract.md, section 3)."""
        tensors: dict[str, tensorfile.RawTensor] = {}

        def store(value: Any) -> str | None:
            raw = self.tensor_out(value)
            if raw is None:
                return None
            name = str(len(tensors))
            tensors[name] = raw
            return name

        text = plaindata.encode(state, store)
        return tensorfile.dumps(tensors, {"format": STATE_FORMAT, "state": text})

    def deserialize(self, data: bytes) -> Any:
        """The state :meth:`serialize` wrote. The checkpoint volume may be written by others
        (another tenant, a compromised job): the file is parsed as the safetensors format and
        JSON, nothing in it is unpickled, imported or called; anything else is refused with
        :class:`UnsafeCheckpoint`."""
        # Parsed first, named after: a safetensors file starts with its header's length, whose
        # low byte is 0x80 for one header length in 256, the byte a pickle starts with.
        try:
            tensors, metadata = tensorfile.loads(data)
        except tensorfile.TensorFileError as exc:
            old = _legacy(data)
            if old is not None:
                raise UnsafeCheckpoint(f"{old}, refused: checkpoints are never unpickled; this "
                                       "version reads the safetensors format only") from None
            raise UnsafeCheckpoint(f"not a safetensors file: {exc}") from exc
        if metadata.get("format") != STATE_FORMAT or "state" not in metadata:
            raise UnsafeCheckpoint(f"not a SpeCon checkpoint (its metadata has no format "
                                   f"{STATE_FORMAT!r} and state)")

        def tensor(name: str) -> Any:
            raw = tensors.get(name)
            if raw is None:
                raise UnsafeCheckpoint(f"the state names tensor {name[:40]!r}, not in the file")
            return self.tensor_in(raw)

        try:
            return plaindata.decode(metadata["state"], tensor)
        except plaindata.PlainDataError as exc:
            raise UnsafeCheckpoint(f"the state is not plain data: {exc}") from exc

    def tensor_out(self, value: Any) -> tensorfile.RawTensor | None:
        """``value`` as a tensor to store, or None when it is not one (here: a RawTensor)."""
        return value if isinstance(value, tensorfile.RawTensor) else None

    def tensor_in(self, raw: tensorfile.RawTensor) -> Any:
        """The value of a stored tensor (here: the RawTensor, its bytes copied)."""
        return tensorfile.RawTensor(raw.dtype, raw.shape, bytes(raw.data))

    # -- public ---------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        return self.directory is not None

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    @property
    def threads(self) -> int | None:
        """The thread count the agent's hint asks for (None: no valid hint yet)."""
        return self.thread_hint.threads if self.thread_hint is not None else None

    @property
    def reporter(self) -> Reporter:
        return self._reporter if self._reporter is not None else default_reporter()

    def request_stop(self, reason: str = "manual") -> None:
        """Ask for save-and-exit at the next step boundary (what SIGTERM does)."""
        self._stop_reason = reason
        self._stop.set()

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.request_stop("sigterm")

    def checkpoints(self) -> list[tuple[int, str]]:
        """(step, name) of every checkpoint with a manifest, newest first."""
        if self.directory is None:
            return []
        try:
            return self._list()
        except OSError:
            return []

    def _list(self) -> list[tuple[int, str]]:
        assert self.directory is not None
        found = []
        with os.scandir(self.directory) as it:
            for entry in it:
                stem, dot, suffix = entry.name.rpartition(".")
                if not (dot and suffix == "json" and stem.startswith(_PREFIX)):
                    continue
                try:
                    step = int(stem[len(_PREFIX):])
                except ValueError:
                    continue
                found.append((step, stem))
        return sorted(found, reverse=True)

    def save(self, state: Any, step: int, reason: str = "manual") -> Saved | None:
        """Write, verify and rotate one checkpoint; the previous one stays until this verifies."""
        if self.directory is None:
            return None
        if self._last is not None and self._last.step == step and self._verify_file(self._last):
            return self._last  # nothing ran since that save: the same state is on disk
        start = time.perf_counter()
        name = f"{_PREFIX}{step:09d}"
        data = self.serialize(state)
        digest = _sha256(data)
        data_path = self.directory / f"{name}{self.suffix}"
        manifest = {
            "format": MANIFEST_FORMAT,
            "name": name,
            "step": step,
            "file": data_path.name,
            "kind": self.kind,
            "bytes": len(data),
            "sha256": digest,
            "created": round(time.time(), 6),
        }
        try:
            atomic_write(data_path, data)
        except OSError as exc:
            self._failed(name, step, why(exc), wrote=False)
            return None
        try:
            atomic_write(self.directory / f"{name}.json", json.dumps(manifest).encode())
        except OSError as exc:
            self._failed(name, step, why(exc), wrote=True)
            return None
        saved = Saved(name, step, data_path, len(data), digest, 0.0)
        if not self._verify_file(saved):
            # Leave the older ones alone: they are still the last good state.
            self._failed(name, step, "verify", wrote=True)
            return None
        saved = Saved(name, step, data_path, len(data), digest, time.perf_counter() - start)
        self._last = saved
        self._good = name
        self._prune()
        self._write_saved(saved, reason)
        self.reporter.event(
            "checkpoint", step=step, name=name, bytes=len(data), sha256=digest,
            seconds=round(saved.seconds, 6), reason=reason,
        )
        return saved

    def _failed(self, name: str, step: int, reason: str, wrote: bool) -> None:
        """A save that did not happen: remove what it wrote (its data file once renamed into
        place, whose manifest is missing or wrong), never an older checkpoint; report it; the
        job goes on."""
        if wrote:
            self._remove(name)
        self.reporter.event("checkpoint-failed", step=step, name=name, reason=reason)
        still = f"{self._good} is still the last good one" if self._good else "none is saved yet"
        warn(f"checkpoint {name} not saved (step {step}): {reason}; {still}")

    def load(self) -> Restored | None:
        """The newest checkpoint that verifies and loads, without applying it anywhere."""
        if self.directory is None:
            return None
        start = time.perf_counter()
        try:
            # What an interrupted or failed save left: temporary files, data without manifest.
            remove_partials(self.directory, _PREFIX,
                            (Checkpointer.suffix, self.suffix, *LEGACY_SUFFIXES))
            found = self._list()
        except OSError as exc:
            warn(f"cannot read the checkpoint folder {self.directory} ({why(exc)}): starting "
                 "from scratch")
            return None
        rejected: list[tuple[str, str]] = []
        for step, name in found:
            reason, state = self._try_load(name)
            if reason is None:
                self._good = name
                return Restored(state, step, name, time.perf_counter() - start, tuple(rejected))
            rejected.append((name, reason))
        if rejected:
            self.reporter.event(
                "resume-failed", rejected=[{"name": n, "reason": r} for n, r in rejected]
            )
            warn(f"no checkpoint in {self.directory} could be read ("
                 + "; ".join(f"{n}: {r}" for n, r in rejected) + "): starting from scratch")
        return None

    def resume(self) -> Restored | None:
        """Load the last good checkpoint (None when there is none) and say which one."""
        restored = self.load()
        if restored is not None:
            self._announce(restored)
        return restored

    def step_end(self, step: int, state: Any | Callable[[], Any] = None) -> Saved | None:
        """Call after each completed step; saves when due and exits 143 when told to stop."""
        if self.directory is None:
            return None
        if self.thread_hint is not None:
            self.thread_hint.poll(step)
        request = self._pending_request()
        stop = self._stop.is_set()
        due = self.every > 0 and step % self.every == 0
        if not (stop or request is not None or due):
            return None
        current = state() if callable(state) else state
        reason = self._stop_reason if stop else ("request" if request is not None else "periodic")
        saved = self.save(current, step, reason=reason)
        code = EXIT_STOPPED
        if request is not None and saved is not None:
            before, self._handled_request = self._handled_request, str(request.get("id"))
            if not self._write_saved(saved, "request"):
                # Not acknowledged: the requester waits, and the request is honoured again at
                # the next step boundary.
                self._handled_request = before
            elif request.get("exit"):
                stop = True
                if request.get("done") is True and not self._stop.is_set():
                    # The job is finished (its quality target is reached): exit as completed.
                    code, reason = EXIT_DONE, "done"
        # After SIGTERM the job stops even when this save failed (the pod is going away): the
        # last verified checkpoint, named in the stop event, is where a restart resumes.
        if stop and (saved is not None or self._stop.is_set()):
            if saved is None:
                warn(f"stopping ({reason}) without a new checkpoint: a restart resumes from "
                     f"{self._good or 'scratch'}")
            self.reporter.event("stop", step=step, exit_code=code, reason=reason,
                                checkpoint=saved.name if saved is not None else self._good)
            self.reporter.close()
            raise SystemExit(code)
        return saved

    # -- internals ------------------------------------------------------------------------
    def _announce(self, restored: Restored) -> None:
        self.reporter.event(
            "resume", step=restored.step, name=restored.name,
            seconds=round(restored.seconds, 6),
            rejected=[{"name": n, "reason": r} for n, r in restored.rejected],
        )

    def _try_load(self, name: str) -> tuple[str | None, Any]:
        assert self.directory is not None
        problem, _, data, file = _verify(self.directory, name)
        if problem is not None:
            return problem, None
        try:
            return None, self.deserialize(data)
        except Exception as exc:
            return f"cannot load {file} ({type(exc).__name__}: {exc})", None

    def _verify_file(self, saved: Saved) -> bool:
        try:
            return _sha256(saved.path.read_bytes()) == saved.sha256
        except OSError:
            return False

    def _remove(self, name: str) -> None:
        assert self.directory is not None
        for suffix in (".json", self.suffix, *LEGACY_SUFFIXES):
            path = self.directory / f"{name}{suffix}"
            with contextlib.suppress(OSError):
                path.unlink()

    def _prune(self) -> None:
        for _, name in self.checkpoints()[self.keep:]:
            self._remove(name)

    def _read_saved(self) -> dict[str, Any]:
        assert self.directory is not None
        try:
            value = json.loads((self.directory / SAVED_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def _write_saved(self, saved: Saved, reason: str) -> bool:
        """Rewrite ``saved.json`` (the saved signal); False, reported, when it cannot be."""
        assert self.directory is not None
        body = {
            "checkpoint": saved.name,
            "step": saved.step,
            "sha256": saved.sha256,
            "bytes": saved.bytes,
            "reason": reason,
            "request": self._handled_request,
            "time": round(time.time(), 6),
        }
        try:
            atomic_write(self.directory / SAVED_FILE, json.dumps(body).encode())
        except OSError as exc:
            warn(f"{SAVED_FILE} not written for {saved.name} ({why(exc)}); the checkpoint "
                 "itself is verified")
            return False
        return True

    def _pending_request(self) -> dict[str, Any] | None:
        assert self.directory is not None
        try:
            value = json.loads((self.directory / REQUEST_FILE).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None  # half-written by the requester: look again at the next step
        if not isinstance(value, dict) or "id" not in value:
            return None
        if str(value["id"]) == self._handled_request:
            return None
        return value
