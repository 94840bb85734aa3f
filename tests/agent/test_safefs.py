"""Issue 14: pod-supplied paths stay beneath their root on real files: ``..`` traversal, a
symlink (at the end or in the middle), a FIFO, a device and an oversized file are refused, and a
confined write cannot land outside the root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specon_agent import safefs
from specon_agent.safefs import ConfinementError, open_beneath, read_beneath, write_beneath


@pytest.fixture(params=["openat2", "walk"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    # Both resolvers run on real files; "walk" is the fallback for kernels without openat2.
    if request.param == "walk":
        monkeypatch.setattr(safefs, "_have_openat2", False)
    return str(request.param)


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "shared"
    (root / "ns-a" / "job").mkdir(parents=True)
    secret = tmp_path / "secret-token"
    secret.write_bytes(b"12345678901234567890")
    return root, secret


def test_a_file_beneath_the_root_is_read(tmp_path: Path, mode: str) -> None:
    root, _ = _tree(tmp_path)
    (root / "ns-a" / "job" / "progress.jsonl").write_bytes(b"{}\n")
    assert read_beneath(root, "/ns-a/job/progress.jsonl", 100) == b"{}\n"


def test_traversal_is_refused(tmp_path: Path, mode: str) -> None:
    root, _ = _tree(tmp_path)
    with pytest.raises(ConfinementError):
        read_beneath(root, "/../../../../" + str(tmp_path / "secret-token"), 100)
    with pytest.raises(ConfinementError):
        read_beneath(root, "ns-a/../../secret-token", 100)


def test_symlinks_are_refused_at_the_end_and_in_the_middle(tmp_path: Path, mode: str) -> None:
    root, secret = _tree(tmp_path)
    (root / "ns-a" / "job" / "progress.jsonl").symlink_to(secret)
    (root / "ns-a" / "up").symlink_to(tmp_path)
    with pytest.raises(ConfinementError):
        read_beneath(root, "ns-a/job/progress.jsonl", 100)
    with pytest.raises(ConfinementError):
        read_beneath(root, "ns-a/up/secret-token", 100)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path, mode: str) -> None:
    root, _ = _tree(tmp_path)
    os.mkfifo(root / "ns-a" / "job" / "data.pt")  # no writer: a blocking open would hang
    with pytest.raises(ConfinementError, match="not a regular file"):
        open_beneath(root, "ns-a/job/data.pt")


def test_a_device_and_an_oversized_file_are_refused(tmp_path: Path, mode: str) -> None:
    with pytest.raises(ConfinementError):
        read_beneath("/dev", "zero", 1 << 20)
    root, _ = _tree(tmp_path)
    (root / "big").write_bytes(b"x" * 1001)
    with pytest.raises(ConfinementError, match="over 1000"):
        read_beneath(root, "big", 1000)


def test_a_write_is_confined_and_does_not_follow_a_symlinked_folder(tmp_path: Path,
                                                                   mode: str) -> None:
    root, _ = _tree(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "ns-a" / "ckpt").symlink_to(outside)
    with pytest.raises(ConfinementError):
        write_beneath(root, "ns-a/ckpt/request.json", b"{}")
    with pytest.raises(ConfinementError):
        write_beneath(root, "ns-a/../../outside/request.json", b"{}")
    assert list(outside.iterdir()) == []
    write_beneath(root, "ns-a/job/request.json", b'{"id": 1}')
    assert (root / "ns-a" / "job" / "request.json").read_bytes() == b'{"id": 1}'


def test_a_write_never_opens_what_the_pod_planted_at_its_temporary_name(
        tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 29: the temporary name is unguessable; even when the pod guesses it (forced here),
    # the exclusive create fails instead of opening its FIFO or following its symlink.
    root, secret = _tree(tmp_path)
    job = root / "ns-a" / "job"
    monkeypatch.setattr(safefs.secrets, "token_hex", lambda n: "guessed")
    (job / ".request.json.tmp-guessed").symlink_to(secret)
    with pytest.raises(FileExistsError):
        write_beneath(root, "ns-a/job/request.json", b"{}")
    assert secret.read_bytes() == b"12345678901234567890"
    (job / ".request.json.tmp-guessed").unlink()
    os.mkfifo(job / ".request.json.tmp-guessed")
    with pytest.raises(FileExistsError):
        write_beneath(root, "ns-a/job/request.json", b"{}")
    assert sorted(p.name for p in job.iterdir()) == [".request.json.tmp-guessed"]
    monkeypatch.undo()
    write_beneath(root, "ns-a/job/request.json", b"{}")
    assert (job / "request.json").stat().st_mode & 0o777 == 0o644
