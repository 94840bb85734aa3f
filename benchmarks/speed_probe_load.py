"""The agent's CPU speed probe (specon_agent.speed_probe) on an idle machine and on the same
machine with every core busy (a Python loop and a multi-threaded numpy matrix loop), each
probe as the agent runs it. Prints every probe and the medians; the probe counts CPU time of
its own thread, so a busy run queue should not make the node look slower.

    python benchmarks/speed_probe_load.py [--probes 16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specon_agent.speed_probe import measure_cpu_speed

BUSY = ["while True: pass",
        "import numpy as np\na = np.ones((512, 512), np.float32)\nwhile True: a @ a"]


def probes(n: int) -> list[float]:
    return [s for s in (measure_cpu_speed() for _ in range(n)) if s is not None]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probes", type=int, default=16)
    a = ap.parse_args()
    idle = probes(a.probes)
    cores = os.cpu_count() or 1
    busy = [subprocess.Popen([sys.executable, "-c", BUSY[i % 2]]) for i in range(cores)]
    try:
        time.sleep(1)
        loaded = probes(a.probes)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    for name, got in (("idle", idle), (f"{cores} busy processes", loaded)):
        print(f"{name}: median {statistics.median(got):.3f}, min {min(got):.3f}, "
              f"max {max(got):.3f}: {' '.join(f'{s:.3f}' for s in got)}")


if __name__ == "__main__":
    main()
