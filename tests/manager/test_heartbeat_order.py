"""A node's heartbeats ordered by (agent boot id, sequence), and agents' clocks that step
(issue 32), through the real app under uvicorn: a restarted agent (new boot id) is heard at
once whatever its clock and sequence said before; within one boot the sequence alone orders;
a late heartbeat of a boot already replaced is not kept; a heartbeat from the future beyond
the tolerance is refused with the reason and leaves the node's reports alone, and the next
correct one is accepted at once; a heartbeat without a boot id (the previous release's agent)
keeps the old rule. All of that only within the reorder window after the node's kept
heartbeat: past it the manager's receive order wins, so one hostile heartbeat (huge seq, time
ahead, a made-up boot id) cannot shut a node's real heartbeats out (issue 29)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from managerlib import TOKENS, Clock, auth, heartbeat, job, serve

from specon.wire import MAX_SEQ
from specon_manager.app import create_app
from specon_manager.auth import NodeTokens
from specon_manager.settings import ManagerSettings
from specon_manager.state import ClusterState


@pytest.fixture
def manager() -> Iterator[tuple[str, ClusterState]]:
    app = create_app(ManagerSettings(kubernetes=False, heartbeat_interval_s=10),
                     tokens=NodeTokens(TOKENS))
    with serve(app) as url:
        yield url, app.state.cluster


def send(url: str, node: str, **fields: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/heartbeat", headers=auth(node),
                      json={**heartbeat(node), **fields})


def accepted(r: httpx.Response) -> bool:
    assert r.status_code == 200, r.text
    return bool(r.json()["accepted"])


def test_a_restarted_agent_is_heard_at_once_after_its_clock_was_ahead(manager: Any) -> None:
    """The agent's clock ran 250 s ahead (inside the tolerance), then was corrected with a
    restart: before, its new heartbeats (lower seq, earlier time) were answered 200 and
    dropped until its clock caught up, and the node went stale."""
    url, state = manager
    ahead = time.time() + 250
    for seq in range(1, 111):
        assert accepted(send(url, "node-1", seq=seq, time=ahead, boot="boot-a",
                             jobs=[job("old", "PC")]))
    assert accepted(send(url, "node-1", seq=1, boot="boot-b", jobs=[job("new", "CC")]))
    hb = state.heartbeat("node-1")
    assert (hb.boot, hb.seq, [j.pod for j in hb.jobs]) == ("boot-b", 1, ["new"])
    assert accepted(send(url, "node-1", seq=2, boot="boot-b"))
    # a heartbeat of the replaced boot still in flight arrives late: not kept
    assert not accepted(send(url, "node-1", seq=111, time=ahead, boot="boot-a"))
    assert state.heartbeat("node-1").boot == "boot-b"


def test_within_one_boot_the_sequence_alone_orders(manager: Any) -> None:
    url, state = manager
    now = time.time()
    assert accepted(send(url, "node-2", seq=5, time=now, boot="b1"))
    # sent before seq 5, stamped later (the clock stepped back in between): older, not kept
    assert not accepted(send(url, "node-2", seq=4, time=now + 100, boot="b1"))
    assert state.heartbeat("node-2").seq == 5
    # the clock stepped back: a later heartbeat with an earlier time is still newer
    assert accepted(send(url, "node-2", seq=6, time=now - 100, boot="b1"))
    assert state.heartbeat("node-2").seq == 6


def test_a_heartbeat_from_the_future_is_refused_and_the_next_correct_one_accepted(
        manager: Any) -> None:
    url, state = manager
    assert accepted(send(url, "node-3", seq=1, boot="b", jobs=[job("a", "PC")]))
    r = send(url, "node-3", seq=2, boot="b", time=time.time() + 3600, jobs=[job("a", "CC")])
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert "ahead of the manager's clock" in detail and "node-3" in detail, detail
    hb = state.heartbeat("node-3")
    assert (hb.seq, hb.jobs[0].category) == (1, "PC")  # the node's report is left alone
    # its clock is right again: heard at once, whatever the refused one said
    assert accepted(send(url, "node-3", seq=3, boot="b", jobs=[job("a", "WC")]))
    assert state.heartbeat("node-3").jobs[0].category == "WC"
    r = send(url, "node-3", seq=4, boot="b", time=time.time() - 3600)
    assert r.status_code == 422 and "behind the manager's clock" in r.json()["detail"]


def test_without_a_boot_id_the_old_rule_holds(manager: Any) -> None:
    url, state = manager
    now = time.time()
    assert accepted(send(url, "node-4", seq=10, time=now))
    assert not accepted(send(url, "node-4", seq=9, time=now - 1))  # older in seq and time
    assert accepted(send(url, "node-4", seq=9, time=now + 1))  # seq lower, time later: kept
    assert not accepted(send(url, "node-4", seq=1, time=now - 5))  # a restart not recognised
    # an upgraded agent (a boot id, after none) is a restart: heard at once
    assert accepted(send(url, "node-4", seq=1, time=now - 5, boot="new"))
    assert state.heartbeat("node-4").boot == "new"


@pytest.fixture
def clocked() -> Iterator[tuple[str, ClusterState, Clock]]:
    """The real app under uvicorn, its state on an injected receive clock (the agents' interval
    passes without waiting; the skew bound still reads the real clock)."""
    clock = Clock()
    state = ClusterState(stale_after_s=90, clock=clock, reorder_window_s=5)
    app = create_app(ManagerSettings(kubernetes=False, heartbeat_interval_s=30), state=state,
                     tokens=NodeTokens(TOKENS))
    with serve(app) as url:
        yield url, state, clock


AGENT_INTERVAL_S = 10.0  # the agent's default heartbeat_s


@pytest.mark.parametrize("hostile", [
    {"boot": "real", "seq": MAX_SEQ, "time_ahead": 299},  # the agent's own boot id
    {"boot": None, "seq": MAX_SEQ, "time_ahead": 299},  # as an agent of the previous release
    {"boot": "made-up", "seq": MAX_SEQ, "time_ahead": 299},  # a boot id of its own
])
def test_one_hostile_heartbeat_does_not_shut_out_the_nodes_real_ones(
        clocked: Any, hostile: dict[str, Any]) -> None:
    """Issue 29: one heartbeat with seq 2^63-1 stamped 299 s ahead (inside the skew bound)
    made the manager answer the node's real heartbeats accepted=false for about 300 s (with
    the agent's boot id: until the agent restarted; with a boot id of its own, the real one
    was retired for good). Now the next real heartbeat, an interval later, is heard."""
    url, state, clock = clocked
    real = "real" if hostile["boot"] is not None else None
    for seq in (1, 2):
        assert accepted(send(url, "node-5", seq=seq, boot=real, jobs=[job("a", "PC")]))
        clock.now += AGENT_INTERVAL_S
    clock.now += 1
    assert accepted(send(url, "node-5", seq=hostile["seq"], boot=hostile["boot"],
                         time=time.time() + hostile["time_ahead"], jobs=[job("a", "CC")]))
    assert state.heartbeat("node-5").seq == MAX_SEQ
    clock.now += AGENT_INTERVAL_S - 1
    assert accepted(send(url, "node-5", seq=3, boot=real, jobs=[job("a", "WC")]))
    hb = state.heartbeat("node-5")
    assert (hb.boot, hb.seq, hb.jobs[0].category) == (real, 3, "WC")
    clock.now += AGENT_INTERVAL_S
    assert accepted(send(url, "node-5", seq=4, boot=real))
    assert state.fresh_nodes() == ["node-5"]


def test_a_late_heartbeat_is_dropped_only_within_the_reorder_window(clocked: Any) -> None:
    """Inside the window the agent's seq and boot still catch a heartbeat that arrives after a
    newer one; past it the manager's receive order wins."""
    url, state, clock = clocked
    assert accepted(send(url, "node-6", seq=7, boot="b1"))
    clock.now += 4
    assert not accepted(send(url, "node-6", seq=6, boot="b1"))  # late: dropped
    assert accepted(send(url, "node-6", seq=1, boot="b2"))  # restarted: heard at once
    clock.now += 4
    assert not accepted(send(url, "node-6", seq=8, boot="b1"))  # the replaced boot, late
    assert state.heartbeat("node-6").boot == "b2"
    clock.now += 6
    # b1 heard again 10 s after it was replaced: the receive order wins (b2 may be the impostor)
    assert accepted(send(url, "node-6", seq=9, boot="b1"))
    assert state.heartbeat("node-6").boot == "b1"
