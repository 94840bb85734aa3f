"""The project's images built on the local Docker Engine without a registry: a build context
like the repository's plus a wheels/ folder (the offline path Dockerfile.manager and
Dockerfile.agent support; docs/user-guide.md), used by tests/deploy/test_images.py and by the
real-node tests (tests/nodes/)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", *args],
                   check=True, timeout=900)


def role_requirements(*roles: str) -> list[str]:
    """The requirements of the pyproject extras ``roles``, self-references expanded."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    out: set[str] = set()
    todo, seen = list(roles), set()
    while todo:
        role = todo.pop()
        if role in seen:
            continue
        seen.add(role)
        for req in extras[role]:
            if req.startswith("specon["):
                todo.extend(x.strip() for x in req[len("specon["):-1].split(","))
            else:
                out.add(req)
    return sorted(out)


def image_context(ctx: Path) -> Path:
    """Fill the empty folder ``ctx`` with a build context like the repository's, plus wheels/
    (the dependencies cached by the hash of pyproject.toml under ~/.cache/specon-images; the
    project's wheel built fresh)."""
    pyproject = (ROOT / "pyproject.toml").read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specon-images" / (
        "wheels-py311-" + hashlib.sha256(pyproject).hexdigest()[:16])
    if not (cache / ".complete").exists():
        cache.mkdir(parents=True, exist_ok=True)
        deps = role_requirements("agent", "manager")
        # Wheels for the base image's interpreter (CPython 3.11 on glibc x86-64).
        _pip("download", "--only-binary=:all:", "--python-version", "3.11",
             "--implementation", "cp", "--platform", "manylinux2014_x86_64",
             "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux_2_28_x86_64",
             "-d", str(cache), "pip", *deps)
        (cache / ".complete").touch()
    ctx.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "README.md", "Dockerfile.manager", "Dockerfile.agent",
                 "Dockerfile.examples", ".dockerignore"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, ctx / name)
    for pkg in ("specon", "specon_agent", "specon_manager", "specon_examples"):
        shutil.copytree(ROOT / pkg, ctx / pkg,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(cache, ctx / "wheels", ignore=shutil.ignore_patterns(".complete"))
    _pip("wheel", "--no-deps", "-w", str(ctx / "wheels"), str(ROOT))
    return ctx


def docker_build(context: Path, dockerfile: str, tag: str, base: str, label: str) -> str:
    """``docker build`` of one of the repository's Dockerfiles; returns the image ID."""
    res = subprocess.run(
        # No network: the context holds every wheel, and an engine without its default bridge
        # (docs/images.md) still builds.
        ["docker", "build", "-q", "--network", "none", "-f", str(context / dockerfile),
         "--build-arg",
         f"BASE={base}", "--label", label, "-t", tag, str(context)],
        capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise RuntimeError(f"{dockerfile} did not build:\n{(res.stdout + res.stderr)[-4000:]}")
    return res.stdout.strip()
