"""Policy names say what a policy does (issue 26): ``specon+flowcon`` is now ``progress`` and
``specon`` is ``progress-equal-share``. The old names are read, through the one table
(specon.core.policy.DEPRECATED_NAMES), as the new policy, with one warning that names the new
name; the registry lists the new names only; an unknown name still fails with the known ones."""

from __future__ import annotations

import logging

import pytest

from specon import defaults
from specon.core.policy import DEPRECATED_NAMES, POLICIES, SHIPPED, canonical, lookup, renamed

OLD_TO_NEW = [("specon+flowcon", "progress"), ("specon", "progress-equal-share")]


def test_the_table_maps_each_old_name_to_a_registered_new_one() -> None:
    assert dict(OLD_TO_NEW) == DEPRECATED_NAMES
    assert all(new in POLICIES for new in DEPRECATED_NAMES.values())
    assert not set(DEPRECATED_NAMES) & set(POLICIES)  # listings show the new names only
    assert SHIPPED == defaults.POLICY == "progress"
    assert lookup("progress").share == "progress" and lookup("progress").thread_hint
    equal = lookup("progress-equal-share")
    assert (equal.placement, equal.moves, equal.share) == ("progress", "progress", "equal")


@pytest.mark.parametrize(("old", "new"), OLD_TO_NEW)
def test_an_old_name_gives_the_new_policy_with_one_warning_naming_it(
        old: str, new: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="specon.core.policy"), \
            pytest.warns(DeprecationWarning, match=f"now called '{new}'") as caught:
        policy = lookup(old)
    assert policy is POLICIES[new]
    assert len(caught) == 1 and caught[0].filename == __file__  # the caller's line
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1 and f"'{old}' is now called '{new}'" in logged[0]
    assert "\n" not in logged[0] and "next release" in logged[0]
    assert renamed(old) == logged[0]


@pytest.mark.parametrize(("old", "new"), OLD_TO_NEW)
def test_canonical_normalises_an_old_name(old: str, new: str) -> None:
    with pytest.warns(DeprecationWarning):
        assert canonical(old) == new


def test_a_current_or_unknown_name_passes_canonical_without_a_warning(
        recwarn: pytest.WarningsRecorder, caplog: pytest.LogCaptureFixture) -> None:
    for name in (*POLICIES, "nope"):
        assert canonical(name) == name
        assert renamed(name) is None
    assert not recwarn.list and not caplog.records


def test_an_unknown_name_still_fails_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown policy 'nope'") as exc:
        lookup("nope")
    assert f"(known: {', '.join(POLICIES)})" in str(exc.value)
    assert "specon+flowcon" not in str(exc.value)
