"""Install size of each role: a fresh virtual environment per pyproject extra, the repository
installed into it (pip's cache makes repeats cheap), and the size of its site-packages.

    python benchmarks/install_size.py [--extras sdk,agent,manager,sim]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--extras", default="sdk,agent,manager,sim")
    a = ap.parse_args()
    print("| install | distributions | site-packages |")
    print("|---|---|---|")
    for extra in [e.strip() for e in a.extras.split(",") if e.strip()]:
        with tempfile.TemporaryDirectory() as tmp:
            venv = Path(tmp) / "venv"
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)],
                           check=True)
            subprocess.run([sys.executable, "-m", "pip", "-q", "--disable-pip-version-check",
                            "--python", str(venv / "bin" / "python"), "install", "--no-compile",
                            f"{ROOT}[{extra}]"], check=True)
            site = next(venv.glob("lib/python*/site-packages"))
            dists = len(list(site.glob("*.dist-info")))
            print(f"| `specon[{extra}]` | {dists} | {size(site) / 2**20:.1f} MiB |", flush=True)


if __name__ == "__main__":
    main()
