"""No decision rule is written twice (issue 13): the simulator (specon/sim), the agent
(specon_agent) and the manager (specon_manager) call the core's composed decisions
(specon.core.node.NodeController, scoring.decide_reallocation and worker_view,
rebalance.plan_rebalance, move_plan.plan_moves and placement.placement_scores, the registries of
specon.core.policy and node.NODE_SHARES) and never rebuild one from its parts. The same check
by hand, from the repository root (it must print nothing):

    git grep -nE "flowcon\\.(step|add_container|remove_container)\\(|[^_.a-z]categorize\\(|\
prioritised\\(|qos_limits\\(|node_shares\\(|LossTrack\\(|\\.without\\(" \
      -- specon/sim specon_agent specon_manager
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = ("specon/sim", "specon_agent", "specon_manager")

#: The parts of the composed decisions: only specon/core may call them.
PARTS = {
    "FlowCon's steps (NodeController)": r"flowcon\.(step|add_container|remove_container)\(",
    "Algorithm 3 (NodeController.categorize_tick)": r"(?<![\w.])categorize\(",
    "the QoS division (NodeController.judge_qos)": r"(?<![\w.])(prioritised|qos_limits)\(",
    "a node share rule (NodeController.divide)": r"(?<![\w.])node_shares\(",
    "a loss track (NodeController's probes)": r"(?<![\w.])LossTrack\(",
    "Algorithm 4's comparison (scoring.decide_reallocation)": r"\.without\(",
    "a worker view from counts (scoring.worker_view)": r"WorkerView\((?![^()]*available=False\))",
}


def adapter_sources() -> list[Path]:
    return sorted(p for d in ADAPTERS for p in (ROOT / d).rglob("*.py"))


def test_adapters_call_the_composed_decisions_never_their_parts() -> None:
    found = []
    for path in adapter_sources():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            for what, pattern in PARTS.items():
                if re.search(pattern, code):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {what}: {line.strip()}")
    assert not found, "a decision rebuilt outside specon/core:\n" + "\n".join(found)


def test_the_check_can_fail() -> None:
    """Each pattern matches the mirrors issue 13 removed (a test that cannot fail is none)."""
    mirrors = [
        "w.flow = flowcon.step(w.flow, eff, self.fparams, classify=False)",
        "res = categorize({n: j.cat for n, j in w.jobs.items()}, growth, self.cfg.alpha)",
        "w.first = prioritised(judged, w.cpus, w.first)",
        "shares = node_shares(w.cpus, loads, sim.cfg.weights, fair=sim.cfg.fair_share)",
        "track, _ = LossTrack().observe(finite[:head], 0.0, 0.0)",
        "judged = [w.without(category) if w.name == current_host else w for w in workers]",
        "view = WorkerView(w.name, pc, wc, cc, used, capacity=w.cpus * w.speed)",
    ]
    for line, (what, pattern) in zip(mirrors, PARTS.items(), strict=True):
        assert re.search(pattern, line), what
    assert not re.search(PARTS["a worker view from counts (scoring.worker_view)"],
                         "out.append(WorkerView(name, available=False))")
    assert not (ROOT / "specon_agent" / "control.py").exists()
