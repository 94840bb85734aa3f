"""``kubectl specon``'s reading of SpeCon's Events (the notes the agent's real LimitNote writes,
the manager's real Event bodies) and its exit codes; against the real API server:
tests/manager/test_kubectl_specon_plane.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specon import kubectl_plugin as kp
from specon_agent.events import LimitNote
from specon_manager.kube import event_body

REPO = Path(__file__).resolve().parents[2]

cores = st.none() | st.floats(min_value=0.001, max_value=4096, allow_nan=False)


@given(before=cores, after=cores, category=st.sampled_from([None, "PC", "WC", "CC"]),
       restored=st.booleans(), count=st.integers(1, 50),
       why=st.sampled_from([None, "set by FlowCon (list 2)", "the agent is stopping"]))
def test_the_limit_and_category_are_read_back_from_every_limit_note(
    before: float | None, after: float | None, category: str | None, restored: bool,
    count: int, why: str | None
) -> None:
    note = LimitNote("ns", "p", "u", "main", before, after, restored=restored,
                     category=category, why=why, count=count)
    limit, cat, ok = kp.read_limit_note(note.message(60.0))
    assert ok and cat == category
    if after is None:
        assert limit is None
    else:  # the note gives three significant figures
        assert limit == pytest.approx(after, rel=5e-3)


@pytest.mark.parametrize("note", [
    "migration 3a4b5c: replacement p placed on n1", "", "CPU limit of container main",
    "job PC; CPU limit of container main lowered from 2 cores to"])
def test_other_notes_are_no_limit(note: str) -> None:
    assert kp.read_limit_note(note)[2] is False


def _ref(name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "metadata": {"name": name, "namespace": "ns", "uid": uid}}


def test_the_lineage_follows_completed_migrations_back() -> None:
    events = [
        event_body(_ref("a", "ua"), "MigrationStarted", "migration m1 (converged): n1 -> n2; "
                   "target reserved", action="Migrate"),
        event_body(_ref("b", "ub"), "MigrationCompleted",
                   "migration m1: replacement b placed on n2", action="Migrate"),
        event_body(_ref("b", "ub"), "MigrationStarted", "migration m2 (progress): n2 -> n3; "
                   "target reserved", action="Migrate"),
        event_body(_ref("c", "uc"), "MigrationCompleted",
                   "migration m2: replacement c placed on n3", action="Migrate"),
        # a cancelled one names no replacement, and an Event from elsewhere is not SpeCon's
        event_body(_ref("x", "ux"), "MigrationStarted", "migration m3 (converged): n1 -> n2",
                   action="Migrate"),
        {**event_body(_ref("y", "uy"), "MigrationCompleted", "migration m3: replacement y",
                      action="Migrate"), "reportingController": "someone-else"},
    ]
    assert kp.lineage(events, "ns", "c", "uc") == [("c", "uc"), ("b", "ub"), ("a", "ua")]
    assert kp.lineage(events, "ns", "b", "ub") == [("b", "ub"), ("a", "ua")]
    assert kp.lineage(events, "ns", "y", "uy") == [("y", "uy")]
    assert kp.lineage(events, "other", "c", "uc") == [("c", "uc")]


def test_a_missing_kubectl_is_a_failure_and_bad_flags_are_bad_input(
    capsys: pytest.CaptureFixture[str]
) -> None:
    assert kp.main(["get", "--kubectl", "no-such-kubectl-here"]) == 1
    assert "no-such-kubectl-here not found" in capsys.readouterr().err
    for argv in (["get", "-n", "a", "-A"], ["describe"], ["nodes", "-o", "yaml"], []):
        with pytest.raises(SystemExit) as exc:
            kp.main(argv)
        assert exc.value.code == 2


def test_the_plugin_needs_only_the_standard_library() -> None:
    heavy = ("pydantic", "numpy", "yaml", "httpx", "kubernetes", "specon.core")
    code = (f"import sys, specon.kubectl_plugin; print([m for m in {heavy!r} "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout
    assert out.strip() == "[]"
