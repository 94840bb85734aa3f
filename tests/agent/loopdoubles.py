"""Stand-ins for the agent's real parts in tests that drive its control loop by hand: an
actuator that writes no cgroup and a CPU meter whose counters the test sets."""

from __future__ import annotations

from specon_agent.actuators.cgroup import CgroupActuator


class Actuator(CgroupActuator):
    """Writes nothing: the limits stay in the controller (no cgroups here)."""

    def apply_many(self, fractions, floor=0.0):  # type: ignore[no-untyped-def]
        return [], {}


class Meter:
    """CPU counters (ns) the test sets: use, and time spent waiting for a CPU (PSI)."""

    def __init__(self) -> None:
        self.ns: dict[str, int] = {}
        self.waited: dict[str, int] = {}

    def usage_ns(self, cid: str) -> int | None:
        return self.ns.get(cid)

    def wait_ns(self, cid: str) -> int | None:
        return self.waited.get(cid)

    def forget(self, cid: str) -> None:
        self.ns.pop(cid, None)
