"""Categories of a job held at a CPU floor: judged per minute (before issue 26) or per step
(specon.core.growth.Pace, what the node controller runs now), on the shipped profiles' real
loss curves.

Each profile's job runs on one core and logs its recorded losses at the pace its step cost
gives (the interval is set so that its run spans ``--intervals`` of them); from interval
``h`` it is held at ``--floor`` cores for ``--hold`` intervals, then given its core back. For
every ``h`` at which the job is progressing, the table counts the holds in which its category
changed while held and the changes of category in all (flaps), under both rules; and the
interval at which the unthrottled job first reaches CC under each rule.

    python benchmarks/category_pace.py                       # floor 0.05, hold 10
    python benchmarks/category_pace.py --compare BEFORE.json AFTER.json
        # two benchmarks/suite.py outputs: median and worst change in average completion
        # against default per policy, and per workload the change between the two
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specon.core.categorize import Category, JobState, categorize  # noqa: E402
from specon.core.flowcon import FlowConParams  # noqa: E402
from specon.core.growth import LossTrack  # noqa: E402
from specon.core.node import NodeController  # noqa: E402
from specon.defaults import ALPHA  # noqa: E402
from specon.sim.experiments import shipped_profiles  # noqa: E402


def stream(loss: list[float], per_interval: float, cores: list[float]) -> list[list[float]]:
    """The records logged in each interval at these cores (the step rate follows the CPU)."""
    out, k, debt = [], 0, 0.0
    for c in cores:
        debt += per_interval * c
        n = int(debt + 1e-9)
        debt -= n
        out.append(loss[k:k + n])
        k += n
    return out


def per_minute(chunks: list[list[float]], cores: list[float], interval: float,
               alpha: float) -> list[Category]:
    track, state, out = LossTrack(), JobState(), []
    for chunk, c in zip(chunks, cores, strict=True):
        track, g = track.observe(chunk, interval, c * interval)
        state = categorize({"j": state}, {"j": g.progress if g else None}, alpha).states["j"]
        out.append(state.category)
    return out


def per_step(chunks: list[list[float]], cores: list[float], interval: float,
             alpha: float) -> list[Category]:
    ctl = NodeController(FlowConParams(alpha=alpha, itval_s=interval, beta=1.0), alpha)
    ctl.arrive("j", 0.0, 0.0)
    out, cpu, now = [], 0.0, 0.0
    for chunk, c in zip(chunks, cores, strict=True):
        ctl.add_losses("j", chunk)
        now += interval
        cpu += c * interval
        ctl.categorize_tick(now, {"j": cpu})
        out.append(ctl.jobs["j"].cat.category)
    return out


def changes(cats: list[Category]) -> int:
    return sum(a is not b for a, b in pairwise(cats))


def floor_table(args: argparse.Namespace) -> None:
    rules = {"per minute": per_minute, "per step": per_step}
    print(f"floor {args.floor} core(s) for {args.hold} intervals, alpha {args.alpha}, "
          f"each run {args.intervals} intervals at one core\n")
    print("| profile | records / interval | holds | changed while held: per minute | per step "
          "| changes from the hold to 3 intervals after, per hold: per minute | per step "
          "| first CC unthrottled: per minute | per step |")
    print("|---|---|---|---|---|---|---|---|---|")
    totals = {r: [0, 0] for r in rules}
    holds_all = 0
    for name, prof in shipped_profiles().items():
        per_interval = len(prof.loss) / args.intervals
        free = [1.0] * (args.intervals + 5)
        first_cc = {}
        for r, fn in rules.items():
            cats = fn(stream(prof.loss, per_interval, free), free, 60.0, args.alpha)
            first_cc[r] = (cats.index(Category.CONVERGED) if Category.CONVERGED in cats
                           else None)
        held = {r: 0 for r in rules}
        flaps = {r: 0 for r in rules}
        holds = 0
        for h in range(2, args.intervals):
            cores = [1.0] * h + [args.floor] * args.hold + [1.0] * 3
            chunks = stream(prof.loss, per_interval, cores)
            if sum(map(len, chunks)) >= len(prof.loss):
                break  # the run would end before the hold does
            cats = {r: fn(chunks, cores, 60.0, args.alpha) for r, fn in rules.items()}
            if any(c[h - 1] is not Category.PROGRESSING for c in cats.values()):
                continue
            holds += 1
            for r, c in cats.items():
                held[r] += any(x is not c[h - 1] for x in c[h:h + args.hold])
                flaps[r] += changes(c[h - 1:])
        holds_all += holds
        for r in rules:
            totals[r][0] += held[r]
            totals[r][1] += flaps[r]
        print(f"| {name} | {per_interval:.1f} | {holds} | {held['per minute']} | "
              f"{held['per step']} | {flaps['per minute'] / max(holds, 1):.2f} | "
              f"{flaps['per step'] / max(holds, 1):.2f} | {first_cc['per minute']} | "
              f"{first_cc['per step']} |")
    print(f"| all | | {holds_all} | {totals['per minute'][0]} | {totals['per step'][0]} | "
          f"{totals['per minute'][1] / max(holds_all, 1):.2f} | "
          f"{totals['per step'][1] / max(holds_all, 1):.2f} | | |")


def compare(before_path: str, after_path: str) -> None:
    before, after = (json.loads(Path(p).read_text()) for p in (before_path, after_path))

    def changes_vs_default(doc: dict) -> dict[str, dict[tuple[str, int], float]]:
        out: dict[str, dict[tuple[str, int], float]] = {}
        for w in doc["workloads"]:
            base = w["policies"]["default"]["avg_completion_s"]
            for p, row in w["policies"].items():
                if p != "default":
                    out.setdefault(p, {})[(w["family"], w["workload"])] = (
                        row["avg_completion_s"] / base - 1)
        return out

    b, a = changes_vs_default(before), changes_vs_default(after)
    print("| policy | workloads | avg completion vs default: median before | after | "
          "worst before | after | per workload after − before: median | worst | best |")
    print("|---|---|---|---|---|---|---|---|---|")
    for p in sorted(set(a) & set(b)):
        keys = sorted(set(a[p]) & set(b[p]))
        d = [a[p][k] - b[p][k] for k in keys]
        print(f"| {p} | {len(keys)} | {100 * statistics.median(b[p][k] for k in keys):+.1f}% | "
              f"{100 * statistics.median(a[p][k] for k in keys):+.1f}% | "
              f"{100 * max(b[p][k] for k in keys):+.1f}% | "
              f"{100 * max(a[p][k] for k in keys):+.1f}% | {100 * statistics.median(d):+.2f} pt | "
              f"{100 * max(d):+.2f} pt | {100 * min(d):+.2f} pt |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--floor", type=float, default=0.05, help="cores at the floor")
    ap.add_argument("--hold", type=int, default=10, help="intervals held at the floor")
    ap.add_argument("--intervals", type=int, default=40,
                    help="intervals of one run at one core")
    ap.add_argument("--alpha", type=float, default=ALPHA)
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                    help="compare two benchmarks/suite.py outputs instead")
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
    else:
        floor_table(args)


if __name__ == "__main__":
    main()
