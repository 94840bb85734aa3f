"""Which of a node's heartbeats is the newest, and agents' clocks (docs/manager.md, "Heartbeat
order and agents' clocks").

An agent numbers its heartbeats (``seq``) from 1 at every start and names its start with a
random ``boot`` id. A node's heartbeats are ordered by (boot, seq): a new boot is a restarted
agent, heard at once whatever its clock and seq said before, and the boot it replaces is
retired (a late heartbeat of it is older); within one boot the seq alone orders, so an agent
whose clock steps is still heard in order. A heartbeat without a boot id (an agent of the
previous release) is ordered as then: older only when both its seq and its time are lower.
The clock is only bounded: a heartbeat stamped too far from the manager's clock is refused
(:func:`skew_reason`) and leaves the node's reports as they were."""

from __future__ import annotations

from specon.wire import Heartbeat

#: The replaced agent boots remembered per node.
RETIRED_BOOTS = 4


def newer(hb: Heartbeat, boot: str | None, seq: int, time: float,
          retired: tuple[str, ...]) -> tuple[bool, tuple[str, ...]]:
    """Whether ``hb`` is newer than the node's kept heartbeat (``boot``, ``seq``, ``time``),
    and the node's retired boots afterwards (``retired`` before)."""
    if hb.boot is None:
        return not (hb.seq < seq and hb.time <= time), retired
    if hb.boot == boot:
        return hb.seq >= seq, retired
    if hb.boot in retired:
        return False, retired
    if boot is not None:
        retired = (*retired, boot)[-RETIRED_BOOTS:]
    return True, retired


def skew_reason(hb: Heartbeat, skew: float, allowed: float) -> str:
    """Why a heartbeat whose time is ``skew`` seconds off the manager's clock is refused."""
    where = "ahead of" if skew > 0 else "behind"
    return (f"heartbeat of {hb.node} (seq {hb.seq}) is stamped {abs(skew):.0f} s {where} the "
            f"manager's clock (at most {allowed:.0f} s allowed): the node's clock is wrong; "
            "its heartbeats are refused until it is right, and its last accepted report stands")
