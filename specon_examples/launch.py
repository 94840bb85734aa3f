"""How to start an example job from another interpreter: which Python has torch, and the
command and environment that run `python -m specon_examples.<model>`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: Debian's interpreter, for which python3-torch is built (see docs/examples.md).
DEBIAN_PYTHON = "/usr/bin/python3"
ROOT = Path(__file__).resolve().parent.parent


def _has_torch(python: str) -> bool:
    try:
        done = subprocess.run([python, "-c", "import torch, sklearn"], capture_output=True,
                              timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def torch_python() -> str | None:
    """$SPECON_TORCH_PYTHON, else this interpreter, else Debian's, if it imports torch."""
    for candidate in (os.environ.get("SPECON_TORCH_PYTHON"), sys.executable, DEBIAN_PYTHON):
        if candidate and _has_torch(candidate):
            return candidate
    return None


def command(python: str, model: str, *args: str) -> list[str]:
    return [python, "-m", f"specon_examples.{model}", *args]


def env(**extra: str) -> dict[str, str]:
    """The current environment with this checkout on PYTHONPATH (Debian's Python has no
    editable install of it)."""
    result = dict(os.environ)
    paths = [str(ROOT), *filter(None, result.get("PYTHONPATH", "").split(os.pathsep))]
    result["PYTHONPATH"] = os.pathsep.join(paths)
    result.update(extra)
    return result
