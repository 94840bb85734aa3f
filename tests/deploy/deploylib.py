"""Helpers for the installation tests: Helm run from the test plane's build, chart rendering,
and the rendered objects by kind and name."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specon"
DEPLOY = ROOT / "deploy"
#: The Kubernetes version the chart is rendered for (the test plane's).
KUBE_VERSION = "v1.33.13"
ACTUATORS = ("docker", "cgroup", "resize")


def helm(bin_dir: Path, *args: str, home: Path, check: bool = True,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the test plane's helm with its cache, config and data kept under ``home``."""
    env = dict(os.environ)
    for var, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"),
                     ("HELM_DATA_HOME", "data")):
        env[var] = str(home / sub)
    res = subprocess.run([str(bin_dir / "helm"), *args], capture_output=True, text=True,
                         env=env, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({res.returncode}):\n"
                             f"{res.stdout}{res.stderr}")
    return res


def set_args(values: dict[str, Any] | None) -> list[str]:
    out: list[str] = []
    for key, value in (values or {}).items():
        if isinstance(value, (list, dict)):
            out += ["--set-json", f"{key}={json.dumps(value)}"]
        else:
            flag = "--set-string" if isinstance(value, str) else "--set"
            out += [flag, f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    return out


def render(bin_dir: Path, home: Path, values: dict[str, Any] | None = None,
           release: str = "specon", namespace: str = "specon-system",
           extra: Sequence[str] = ()) -> str:
    """``helm template`` of the chart with these values, as YAML text."""
    return helm(bin_dir, "template", release, str(CHART), "--namespace", namespace,
                "--kube-version", KUBE_VERSION, *set_args(values), *extra, home=home).stdout


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def find(objs: Iterable[dict[str, Any]], kind: str,
         name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind
            and (name is None or o["metadata"]["name"] == name)]


def one(objs: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec
