"""What each role's install pulls in (pyproject extras): a training image that wants only the
SDK gets no web, Kubernetes or plotting package, and each service only what it imports.
Resolved by pip against the package index without installing anything."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from deploylib import ROOT

pytestmark = pytest.mark.slow

def resolved(extra: str) -> set[str]:
    """Names of the distributions pip would install for ``specon[extra]`` in a fresh venv."""
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--disable-pip-version-check", "--report", "-", f"{ROOT}[{extra}]"],
        capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)
    return {i["metadata"]["name"].lower().replace("_", "-") for i in report["install"]}


def test_the_sdk_installs_nothing_but_itself():
    assert resolved("sdk") == {"specon"}


def test_the_agent_installs_no_web_framework_or_plotting():
    got = resolved("agent")
    assert {"kubernetes", "docker", "pydantic"} <= got
    assert not got & ({"fastapi", "starlette", "uvicorn"} | {"matplotlib", "scipy", "typer"})


def test_the_manager_installs_no_container_engine_client_or_plotting():
    got = resolved("manager")
    assert {"fastapi", "uvicorn", "pydantic"} <= got
    assert not got & ({"docker", "kubernetes"} | {"matplotlib", "scipy", "typer"})


def test_the_sdk_imports_with_the_standard_library_alone(tmp_path):
    # a bare interpreter with only the repository on its path: no site-packages at all
    heavy = ("pydantic", "numpy", "fastapi", "kubernetes", "matplotlib", "httpx")
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); import specon.sdk; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}))")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
