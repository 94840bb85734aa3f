"""The long form of the fault-injection campaign (issues 15 and 32): runs of the campaign in
``tests/campaign/campaignlib.py`` on a plane of their own, each with its own seed, until at
least ``--faults`` faults have been injected, drawn from every kind (``campaignlib.KINDS``, the
second round's included); prints the table (fault kind, count, recovered, time to recover:
median and max) and every invariant violation, and writes the records as JSON.

    python benchmarks/fault_campaign.py --faults 200 --per-run 40 --out results/fault-campaign

Needs the test plane's binaries (SPECON_TESTPLANE_BIN, as the test command sets it), dockerd
and a static busybox (the test command installs both), and root: the jobs' volume is a tmpfs
the campaign mounts (the volume faults fill it and turn it read-only)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "campaign")]

from campaignlib import KINDS, FaultRecord, World, run, table  # noqa: E402
from planelib import Plane, require_bin_dir  # noqa: E402


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--faults", type=_positive, default=200, help="faults in all (default 200)")
    ap.add_argument("--per-run", type=_positive, default=40,
                    help="faults per run, each run on a fresh plane (default 40)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the first run (then +1)")
    ap.add_argument("--outage", type=float, nargs=2, default=(5.0, 30.0), metavar=("MIN", "MAX"),
                    help="API server outage in seconds (default 5 30)")
    ap.add_argument("--no-engine", action="store_true",
                    help="without the private Docker Engine lane (no engine-restart faults)")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "fault-campaign")
    args = ap.parse_args()
    if not 0 < args.outage[0] <= args.outage[1]:
        ap.error(f"--outage: need 0 < MIN <= MAX, got {args.outage}")
    bin_dir = require_bin_dir()
    args.out.mkdir(parents=True, exist_ok=True)
    faults: list[FaultRecord] = []
    violations: list[str] = []
    runs = []
    seed = args.seed
    t0 = time.monotonic()
    while len(faults) < args.faults:
        n = min(args.per_run, args.faults - len(faults))
        with tempfile.TemporaryDirectory(prefix="specon-campaign-") as tmp:
            plane = Plane(bin_dir=bin_dir, workdir=Path(tmp) / "plane")
            plane.start()
            try:
                plane.kubectl("create", "namespace", "campaign")
                world = World(plane, "campaign", Path(tmp) / "world", seed=seed,
                              log=lambda s: print(s, flush=True), engine=not args.no_engine)
                print(f"== run seed {seed}: {n} faults", flush=True)
                try:
                    run(world, n, outage_s=tuple(args.outage))
                finally:
                    world.close()
            finally:
                plane.stop()
        faults += world.faults
        violations += [f"seed {seed}: {v}" for v in world.violations]
        runs.append({"seed": seed, "faults": len(world.faults), "jobs": len(world.jobs),
                     "completed": sum(j.done for j in world.jobs.values()),
                     "moves": sum(j.moves for j in world.jobs.values()),
                     "violations": world.violations})
        print(f"== seed {seed}: {runs[-1]}", flush=True)
        seed += 1
    rows = table(faults)
    took = time.monotonic() - t0
    lines = ["| fault | count | recovered | time to recover: median | max |",
             "|---|---|---|---|---|"]
    for r in rows:
        med = "—" if r["median_s"] is None else f"{r['median_s']:.1f} s"
        mx = "—" if r["max_s"] is None else f"{r['max_s']:.1f} s"
        lines.append(f"| {r['kind']} | {r['count']} | {r['recovered']} | {med} | {mx} |")
    jobs = sum(r["jobs"] for r in runs)
    moves = sum(r["moves"] for r in runs)
    summary = (f"{len(faults)} faults in {len(runs)} runs ({took / 60:.0f} min), {jobs} jobs, "
               f"{moves} migrations, {len(violations)} invariant violations")
    print("\n".join(lines))
    print(summary)
    for v in violations:
        print("VIOLATION", v)
    (args.out / "campaign.json").write_text(json.dumps({
        "kinds": KINDS, "runs": runs, "table": rows, "summary": summary,
        "faults": [asdict(f) for f in faults], "violations": violations}, indent=1))
    (args.out / "table.md").write_text("\n".join(lines) + "\n\n" + summary + "\n")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
