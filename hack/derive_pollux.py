"""Derive the compact Pollux/Philly tables shipped in specon/data/pollux/ from the artifact.

Usage: python hack/derive_pollux.py PATH/TO/pollux-osdi21
Writes arrivals.csv (the 16 job streams: stream, name, submit time, application) and
philly-durations.csv (every 16th job of the Philly-derived table: duration in seconds).
The source is Apache-2.0 (see specon/data/pollux/NOTICE).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path


def main(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    with (dst / "arrivals.csv").open("w", newline="") as out:
        w = csv.writer(out)
        w.writerow(["stream", "name", "submit_s", "application"])
        for folder in ("workloads", "workloads-realistic"):
            for path in sorted((src / folder).glob("workload-*.csv")):
                stream = f"{folder}/{path.stem}"
                for row in csv.DictReader(path.open()):
                    w.writerow([stream, row["name"], row["time"], row["application"]])
    with (dst / "philly-durations.csv").open("w", newline="") as out:
        w = csv.writer(out)
        w.writerow(["duration_s"])
        for i, row in enumerate(csv.DictReader((src / "traces" / "philly.csv").open())):
            if i % 16 == 0:
                w.writerow([row["duration"]])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python hack/derive_pollux.py PATH/TO/pollux-osdi21")
    main(Path(sys.argv[1]), Path(__file__).resolve().parent.parent / "specon/data/pollux")
