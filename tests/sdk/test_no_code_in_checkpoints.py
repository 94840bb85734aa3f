"""Issue 14: a checkpoint cannot carry code. Another tenant plants a pickle that would run a
command on load, with a valid manifest and checksum; the job's resume refuses it without running
anything and falls back to the previous checkpoint."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from specon.sdk import SAVED_FILE, Checkpointer, Reporter
from specon.sdk.tensorfile import RawTensor


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



def test_a_checkpoint_whose_header_length_starts_with_the_pickle_byte_is_read(
        tmp_path: Path) -> None:
    """A safetensors file begins with its header's length (8 bytes, little-endian): for one
    header length in 256 its first byte is 0x80, a pickle's first byte. Such a checkpoint is
    the job's own and is read, not refused (a flake of the suite once lost a job's newest
    checkpoint that way)."""
    ck = _ck(tmp_path)
    pad = next(n for n in range(512) if ck.serialize({"pad": "x" * n})[:1] == b"\x80")
    ck.save({"pad": "x" * pad}, 1)
    restored = _ck(tmp_path).load()
    assert restored is not None and restored.step == 1 and not restored.rejected
    assert restored.state == {"pad": "x" * pad}

# -- Issue 29, item 8: no pickle at all on the load path (the safetensors format) --------------

def _plant(directory: Path, payload: bytes, file: str | None = None) -> str:
    """Replace the newest checkpoint's data with ``payload`` (as ``file``, default its own
    name), with a manifest and saved.json that match it: only the content can refuse it."""
    saved = json.loads((directory / SAVED_FILE).read_text())
    mpath = directory / f"{saved['checkpoint']}.json"
    manifest = json.loads(mpath.read_text())
    (directory / manifest["file"]).unlink()
    file = file or manifest["file"]
    digest = hashlib.sha256(payload).hexdigest()
    (directory / file).write_bytes(payload)
    mpath.write_text(json.dumps({**manifest, "file": file, "bytes": len(payload),
                                 "sha256": digest}))
    (directory / SAVED_FILE).write_text(json.dumps({**saved, "sha256": digest}))
    return file


_T = RawTensor("F32", (2,), struct.pack("<2f", 0.5, 1.5))


def _two_saves(directory: Path) -> bytes:
    ck = _ck(directory)
    ck.save({"w": [1, 2], "t": _T}, 1)
    ck.save({"w": [3, 4], "t": _T}, 2)
    return (directory / "ckpt-000000002.safetensors").read_bytes()


def _hostile(good: bytes, marker: Path) -> dict[str, tuple[bytes, str | None, str]]:
    """name -> (payload, file name or None, what the reason must say)."""
    n = int.from_bytes(good[:8], "little")
    header = json.loads(good[8:8 + n])
    lying = json.dumps({**header, "x": {"dtype": "U8", "shape": [4],
                                        "data_offsets": [0, 4]}}).encode()
    evil = pickle.dumps({"w": _Evil(marker)})
    return {
        "pickle named .safetensors": (evil, None, "a pickle, refused"),
        "pickle protocol 0": (pickle.dumps({"w": _Evil(marker)}, protocol=0), None,
                              "not a safetensors file"),
        "an old .pkl checkpoint": (evil, "ckpt-000000002.pkl", "cannot load ckpt-000000002.pkl"),
        "torch.save zip": (b"PK\x03\x04" + evil, None, "torch.save"),
        "truncated": (good[:-3], None, "truncated"),
        "header lying about offsets": (len(lying).to_bytes(8, "little") + lying + good[8 + n:],
                                       None, "overlaps"),
        "gigantic header length": ((2**62).to_bytes(8, "little") + good[8:], None,
                                   "over the limit"),
        "safetensors without our metadata": (b"\x02\x00\x00\x00\x00\x00\x00\x00{}", None,
                                             "not a SpeCon checkpoint"),
    }


def test_hostile_files_are_refused_with_the_reason_and_run_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    good = _two_saves(tmp_path / "probe")
    for case, (payload, file, reason) in _hostile(good, marker).items():
        directory = tmp_path / case.replace(" ", "-")
        _two_saves(directory)
        planted = _plant(directory, payload, file)
        err = io.StringIO()
        restored = Checkpointer(directory, handle_sigterm=False,
                                reporter=Reporter(directory / "p.jsonl", err)).load()
        assert not marker.exists(), case
        assert restored is not None and restored.step == 1, case
        assert restored.state == {"w": [1, 2], "t": _T}
        [(name, why)] = restored.rejected
        assert name == "ckpt-000000002", case
        assert f"cannot load {planted} (UnsafeCheckpoint: " in why, (case, why)
        assert reason in why, (case, why)


TORCH_PLANT = """
import hashlib, io, json, os, sys
from pathlib import Path
import torch
from specon.sdk import Reporter
from specon.sdk.pytorch import TorchCheckpointer

directory, marker = Path(sys.argv[1]), sys.argv[2]
class Evil:
    def __reduce__(self):
        return (os.system, (f"touch {marker}",))

def make():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    ck = TorchCheckpointer(model, opt, directory=directory, handle_sigterm=False,
                           reporter=Reporter(directory / "p.jsonl", io.StringIO()))
    return model, opt, ck

model, opt, ck = make()
ck.save_now(1)
weights = {k: v.clone() for k, v in model.state_dict().items()}
ck.save_now(2)
# the newest: a torch.save pickle, as an older SpeCon wrote (.pt) and as a tenant plants it
buffer = io.BytesIO()
torch.save({"model": model.state_dict(), "evil": Evil()}, buffer)
payload = buffer.getvalue()
(directory / "ckpt-000000002.safetensors").unlink()
(directory / "ckpt-000000002.pt").write_bytes(payload)
manifest = json.loads((directory / "ckpt-000000002.json").read_text())
manifest.update(file="ckpt-000000002.pt", bytes=len(payload),
                sha256=hashlib.sha256(payload).hexdigest())
(directory / "ckpt-000000002.json").write_text(json.dumps(manifest))

with torch.no_grad():
    for p in model.parameters():
        p.zero_()
model, opt, ck = make()
restored = ck.resume()
assert not os.path.exists(marker), "the pickle ran"
assert restored.step == 1, restored
assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
print(json.dumps(restored.rejected))
"""


@pytest.mark.torch
def test_a_torch_save_checkpoint_is_refused_naming_the_file(tmp_path: Path) -> None:
    """What torch.load(weights_only=True) of torch < 2.6 would have unpickled (CVE-2025-32434):
    never loaded; the job resumes from the previous checkpoint and says which file it refused."""
    from specon_examples import launch

    python = launch.torch_python()
    if python is None:
        pytest.skip("no interpreter here imports torch (hack/test.d/30-torch.sh installs one)")
    marker = tmp_path / "pwned"
    (tmp_path / "ck").mkdir()
    done = subprocess.run([python, "-c", TORCH_PLANT, str(tmp_path / "ck"), str(marker)],
                          capture_output=True, text=True, timeout=300, check=False,
                          env=launch.env())
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    [[name, why]] = json.loads(done.stdout.strip().splitlines()[-1])
    assert name == "ckpt-000000002"
    assert why.startswith("cannot load ckpt-000000002.pt (UnsafeCheckpoint: a torch.save"), why
