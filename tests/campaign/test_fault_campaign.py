"""The short form of the fault-injection campaign (issues 15 and 32), on a plane of its own (the
campaign stops and starts its API server and etcd) and a Docker Engine of its own (it restarts
it): 33 faults, every kind of the first round three times and every kind of the second
(``second_round``) once, in an order drawn from a fixed seed, and the invariants of
``campaignlib`` checked throughout. The long form, with at least 200 faults and the README's
table, is ``python benchmarks/fault_campaign.py``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import second_round
from campaignlib import FIRST_ROUND, KINDS, World, run, table
from planelib import Plane

pytestmark = [pytest.mark.plane, pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1500)]


@pytest.fixture
def own_plane(plane_bin: Path, tmp_path: Path) -> Iterator[Plane]:
    p = Plane(bin_dir=plane_bin, workdir=tmp_path / "plane")
    try:
        p.start()
        yield p
    finally:
        p.stop()


def test_a_short_campaign_of_faults_breaks_no_invariant(own_plane: Plane, tmp_path: Path) -> None:
    seed = int(os.environ.get("SPECON_CAMPAIGN_SEED", "15"))
    own_plane.kubectl("create", "namespace", "campaign")
    world = World(own_plane, "campaign", tmp_path / "world", seed=seed, engine=True)
    try:
        run(world, [*FIRST_ROUND * 3, *second_round.KINDS], gap_s=(0.5, 2), outage_s=(5, 8))
    finally:
        world.close()
    rows = table(world.faults)
    for r in rows:
        print(r)
    assert not world.violations, "\n".join(world.violations)
    assert {r["kind"] for r in rows} == set(KINDS)
    assert all(r["recovered"] == r["count"] for r in rows), rows
    done = [j for j in world.jobs.values() if j.done]
    deleted = [j for j in world.jobs.values() if j.deleted is not None]
    assert len(deleted) == 1  # by its user (user-delete), and never back
    assert len(done) + len(deleted) == len(world.jobs) and len(done) >= 6
    # the invariants on migrated jobs and on limits were exercised, not vacuous
    assert sum(j.moves for j in world.jobs.values()) >= 1, "no job was migrated"
    assert world.engine is not None and world.engine.changed_limits() >= 1
