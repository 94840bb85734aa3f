"""Reading workload and profile files (JSON, or YAML), with one clear error per bad file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from specon.workload.models import Profile, Workload


class WorkloadError(ValueError):
    """A workload or profile file is unreadable or invalid; the message names file and field."""


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path}: not a text file (not UTF-8 at byte {exc.start}: a JSON "
                            "or YAML workload is text)") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            return yaml.safe_load(text)
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{path}: not valid YAML ({_yaml_problem(exc)})") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's message in one line: its problem and where (its own text spans several lines,
    with the source quoted)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or not problem:
        return " ".join(str(exc).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def _where(loc: tuple[int | str, ...], data: Any) -> str:
    """Turn a pydantic location into 'job "x", field submit_s' style text."""
    parts: list[str] = []
    node = data
    i = 0
    while i < len(loc):
        key = loc[i]
        if key in ("jobs", "workers") and i + 1 < len(loc) and isinstance(loc[i + 1], int):
            idx = int(loc[i + 1])
            items = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict) and key == "workers":
                items = node.get("workers")
            name = None
            if isinstance(items, list) and idx < len(items) and isinstance(items[idx], dict):
                name = items[idx].get("name")
            label = "job" if key == "jobs" else "worker"
            parts.append(f"{label} {name!r}" if name else f"{label} #{idx + 1}")
            node = items[idx] if isinstance(items, list) and idx < len(items) else None
            i += 2
            continue
        if key == "profiles" and i + 1 < len(loc):
            parts.append(f"profile {loc[i + 1]!r}")
            node = node.get("profiles", {}).get(loc[i + 1]) if isinstance(node, dict) else None
            i += 2
            continue
        parts.append(f"field {key}" if isinstance(key, str) else f"item {key}")
        node = node.get(key) if isinstance(node, dict) and isinstance(key, str) else None
        i += 1
    return ", ".join(parts)


def _explain(path: Path, exc: ValidationError, data: Any) -> WorkloadError:
    err = exc.errors()[0]
    loc = tuple(err.get("loc", ()))
    msg = str(err.get("msg", "invalid"))
    if err.get("type") == "extra_forbidden":
        msg = "unknown key (not in format v1)"
    msg = msg.removeprefix("Value error, ")
    where = _where(loc, data)
    more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
    return WorkloadError(f"{path}: {where + ': ' if where else ''}{msg}{more}")


def load_profile(path: str | Path) -> Profile:
    p = Path(path)
    data = _read(p)
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise _explain(p, exc, data) from None


def parse_workload(data: Any, path: Path, base: Path | None = None) -> Workload:
    """Validate a workload document; profile paths are resolved relative to ``base``."""
    base = base if base is not None else path.parent
    if isinstance(data, dict) and isinstance(data.get("profiles"), dict):
        profiles: dict[str, Any] = {}
        for name, ref in data["profiles"].items():
            if isinstance(ref, str):
                prof = load_profile(base / ref)
                profiles[name] = prof.model_dump()
            else:
                profiles[name] = ref
        data = {**data, "profiles": profiles}
    try:
        return Workload.model_validate(data)
    except ValidationError as exc:
        raise _explain(path, exc, data) from None


def load_workload(path: str | Path) -> Workload:
    p = Path(path)
    return parse_workload(_read(p), p)
