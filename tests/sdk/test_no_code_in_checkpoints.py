"""Issue 14: a checkpoint cannot carry code. Another tenant plants a pickle that would run a
command on load, with a valid manifest and checksum; the job's resume refuses it without running
anything and falls back to the previous checkpoint."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
from pathlib import Path
from typing import Any

from specon.sdk import SAVED_FILE, Checkpointer, Reporter


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _ck(d: Path) -> Checkpointer:
    return Checkpointer(d, handle_sigterm=False, reporter=Reporter(d / "p.jsonl", io.StringIO()))


def test_a_planted_pickle_is_refused_without_running(tmp_path: Path) -> None:
    ck = _ck(tmp_path)
    ck.save({"w": [1, 2], "t": (1, 2.5), "b": b"x", "s": {3}}, 1)
    ck.save({"w": [3, 4]}, 2)
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"w": _Evil(marker)})
    saved = json.loads((tmp_path / SAVED_FILE).read_text())
    mpath = tmp_path / f"{saved['checkpoint']}.json"
    manifest = json.loads(mpath.read_text())
    digest = hashlib.sha256(payload).hexdigest()
    (tmp_path / manifest["file"]).write_bytes(payload)
    mpath.write_text(json.dumps({**manifest, "bytes": len(payload), "sha256": digest}))
    (tmp_path / SAVED_FILE).write_text(json.dumps({**saved, "sha256": digest}))
    restored = _ck(tmp_path).load()
    assert not marker.exists()
    assert restored is not None and restored.step == 1  # the older, plain checkpoint
    assert [n for n, _ in restored.rejected] == [saved["checkpoint"]]  # named, with why
    assert restored.state == {"w": [1, 2], "t": (1, 2.5), "b": b"x", "s": {3}}
