"""The `specon` command's entry point: says which extra to install when the command line's
packages are missing (a training image installs only `specon[sdk]`)."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from specon.cli import main as cli_main
    except ImportError as exc:  # pragma: no cover - exercised by the packaging test
        print(f"specon: the command line needs the simulator's packages ({exc.name} is "
              "missing): pip install 'specon[sim]'", file=sys.stderr)
        sys.exit(2)
    cli_main()
