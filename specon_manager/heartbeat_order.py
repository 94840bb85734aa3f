"""Which of a node's heartbeats is the newest, and agents' clocks (docs/manager.md, "Heartbeat
order and agents' clocks").

The manager's own clock orders a node's heartbeats: the one it received last is the newest.
What an agent says (its random ``boot`` id, new at every start, and ``seq``, from 1 at every
start) only catches a heartbeat that arrives *late*: one received within ``window`` seconds of
the node's kept heartbeat is older when it is of the kept boot with a lower seq, or of a boot
replaced within the window (a heartbeat of the previous agent still in flight); without a boot
id (an agent of the previous release), when both its seq and its time are lower. Past the
window nothing the agent said outranks the manager's clock, so one heartbeat with a huge seq,
a time far ahead or a made-up boot id (a hostile sender with the node's identity, or a garbled
agent) hides the node's real heartbeats for at most ``window`` seconds, never until its clock
or seq catch up (issue 29). A new boot id is a restarted agent, heard at once. The clock is
only bounded: a heartbeat stamped too far from the manager's clock is refused
(:func:`skew_reason`) and leaves the node's reports as they were."""

from __future__ import annotations

from dataclasses import dataclass

from specon.wire import Heartbeat

#: The replaced agent boots remembered per node (each for ``window`` seconds).
RETIRED_BOOTS = 4


@dataclass(frozen=True, slots=True)
class Kept:
    """What ordering needs of a node's kept heartbeat: the agent's word and when the manager
    received it (its own clock)."""

    boot: str | None
    seq: int
    time: float
    received: float


#: Replaced boots of a node: (boot id, when the manager saw it replaced).
Retired = tuple[tuple[str, float], ...]


def newer(hb: Heartbeat, kept: Kept, now: float, window: float,
          retired: Retired) -> tuple[bool, Retired]:
    """Whether ``hb``, received ``now``, replaces the node's ``kept`` heartbeat, and the node's
    retired boots afterwards (``retired`` before; those replaced over ``window`` ago are
    forgotten)."""
    retired = tuple((b, at) for b, at in retired if now - at <= window)
    if now - kept.received <= window:  # it may have been sent before the kept one
        if hb.boot is None:
            if hb.seq < kept.seq and hb.time <= kept.time:
                return False, retired
        elif hb.boot == kept.boot:
            if hb.seq < kept.seq:
                return False, retired
        elif any(b == hb.boot for b, _ in retired):
            return False, retired
    if kept.boot is not None and hb.boot != kept.boot:
        retired = (*[(b, at) for b, at in retired if b != hb.boot],
                   (kept.boot, now))[-RETIRED_BOOTS:]
    return True, retired


def skew_reason(hb: Heartbeat, skew: float, allowed: float) -> str:
    """Why a heartbeat whose time is ``skew`` seconds off the manager's clock is refused."""
    where = "ahead of" if skew > 0 else "behind"
    return (f"heartbeat of {hb.node} (seq {hb.seq}) is stamped {abs(skew):.0f} s {where} the "
            f"manager's clock (at most {allowed:.0f} s allowed): the node's clock is wrong; "
            "its heartbeats are refused until it is right, and its last accepted report stands")
