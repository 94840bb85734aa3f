"""Markdown tables of the built-in experiments from the result.json files that
`bash benchmarks/simulate_all.sh` writes under results/ (for docs/results.md).

    python benchmarks/results_tables.py [results]
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ORDER = ["paper-30", "paper-30-mc", "paper-20", "paper-20-mc", "paper-50x8", "paper-50x8-mc",
         "paper-vae20", "philly-160", "targets-short", "deadlines-short"]


def fmt(v: float, pct: bool = False) -> str:
    if not math.isfinite(v):
        return "—"
    return (f"{v:+.1f}%" if pct else f"{v:.1f}").replace("-", "−")


def table(result: dict) -> str:
    agg = result["aggregate"]
    rows = ["| policy | avg completion (s) | vs default | makespan (s) | vs default | "
            "time to 90% (s) | vs default | headroom captured: avg | t90 | migrations |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for p in result["policies"]:
        a = agg[p]
        avg, mk, t90 = a["avg_completion_s"], a["makespan_s"], a["avg_time_to_90_s"]
        ref = p in ("default", "oracle")
        name = "oracle (bound)" if p == "oracle" else f"**{p}**" if p == "progress" else p
        rows.append(
            f"| {name} | {fmt(avg['mean'])} ± {fmt(avg['ci95'])} | "
            f"{'' if ref else fmt(avg['vs_default_pct']['mean'], True)} | "
            f"{fmt(mk['mean'])} | {'' if ref else fmt(mk['vs_default_pct']['mean'], True)} | "
            f"{fmt(t90['mean'])} | {'' if ref else fmt(t90['vs_default_pct']['mean'], True)} | "
            f"{'' if ref else fmt(avg['headroom_pct']['mean'], True).lstrip('+')} | "
            f"{'' if ref else fmt(t90['headroom_pct']['mean'], True).lstrip('+')} | "
            f"{fmt(a['migrations']['mean'])} |")
    return "\n".join(rows)


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "results")
    for name in ORDER:
        path = root / name / "result.json"
        if not path.exists():
            continue
        result = json.loads(path.read_text())
        print(f"### `{name}` ({len(result['seeds'])} seeds)\n")
        print(table(result))
        first = result["runs"][0]["summary"]
        for key in ("targets", "deadlines"):
            if first[key]:
                met = ", ".join(f"{p} {result['aggregate'][p][key + '_met']['mean']:.1f}"
                                for p in result["policies"] if p != "oracle")
                print(f"\n{key} met, of {first[key]}: {met}")
        print()


if __name__ == "__main__":
    main()
