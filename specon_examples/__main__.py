"""`python -m specon_examples MODEL [options]`: run one example job by name."""

import importlib
import sys

from specon_examples import MODELS

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in MODELS:
        raise SystemExit(f"usage: python -m specon_examples {{{','.join(MODELS)}}} [options]")
    importlib.import_module(f"specon_examples.{sys.argv[1]}").main(sys.argv[2:])
