"""The shipped multi-core profiles (docs/examples.md, "The multi-core jobs"): valid v1
profiles, speed-up tables to 16 cores from the 16-core measurements, falling loss curves; the
multi-core experiments and the random suite draw them, the single-threaded ones do not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specon.sim.experiments import SINGLE_THREADED, shipped_profiles
from specon.workload.models import Profile

PROFILES = Path(__file__).resolve().parents[2] / "specon" / "data" / "profiles"
#: The 16-core host's speed-ups of the same architectures (docs/examples.md).
TABLES = {"cnn-synthetic": {"1": 1.0, "2": 1.46, "4": 2.71, "8": 5.24, "16": 8.21},
          "charlm-synthetic": {"1": 1.0, "2": 1.09, "4": 1.42, "8": 1.56, "16": 1.85}}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_multicore_profile(name):
    profile = Profile.model_validate(json.loads((PROFILES / f"{name}.json").read_text()))
    assert profile.name == name
    assert profile.speedup == TABLES[name]
    assert profile.speed(8) > 1.5 and profile.max_cores == 16
    first, last = profile.loss[0], profile.loss[-1]
    assert last < 0.2 * first
    assert name in shipped_profiles() and name not in SINGLE_THREADED
