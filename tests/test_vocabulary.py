"""One vocabulary (issue 18): every ``specon.io/…`` label, annotation or Event reporter and
every ``SPECON_…`` environment variable that the docs, the chart, the plain manifests, the
examples and the Dockerfiles name is defined in the code, in one place (``specon.names`` for
the labels, annotations, reporters and the training contract's variables; the settings models
for the programs' ``SPECON_AGENT_*`` and ``SPECON_MANAGER_*``; the test command for its own
switches); and every label and annotation defined there is documented. The agent and the
manager apply one opt-in rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specon import names

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
           *sorted((ROOT / "charts").rglob("*.*")), *sorted((ROOT / "deploy").rglob("*.yaml")),
           *sorted((ROOT / "specon_examples").glob("*.py")), *sorted(ROOT.glob("Dockerfile.*"))]
#: How the docs write "any setting": a placeholder, not a name.
PLACEHOLDERS = {"SPECON_AGENT_SNAKE_NAME"}


def mentioned(pattern: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in SOURCES:
        for m in re.findall(pattern, path.read_text(errors="replace")):
            found.setdefault(m, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_label_and_annotation_in_the_docs_is_defined_once_and_documented() -> None:
    defined = set(names.LABELS) | set(names.ANNOTATIONS) | set(names.GATES) | set(
        names.REPORTERS)
    assert len(names.LABELS) + len(names.ANNOTATIONS) == len(
        set(names.LABELS) | set(names.ANNOTATIONS))
    used = mentioned(r"specon\.io/[a-z0-9][a-z0-9.-]*[a-z0-9]")
    unknown = {n: sorted(w) for n, w in used.items() if n not in defined}
    assert not unknown, f"named in the docs but not defined in specon/names.py: {unknown}"
    undocumented = defined - set(used)
    assert not undocumented, f"defined in specon/names.py but in no doc: {undocumented}"


def test_every_specon_variable_in_the_docs_is_a_setting_or_a_contract_variable() -> None:
    from specon_agent.settings import AgentSettings
    from specon_manager.settings import ManagerSettings

    harness = set(re.findall(r"SPECON_[A-Z0-9_]+", "".join(
        p.read_text(errors="replace") for p in [*(ROOT / "hack").rglob("*.sh"),
                                                *(ROOT / "tests").rglob("*.py")])))
    problems = []
    for name, where in sorted(mentioned(r"SPECON_[A-Z0-9_]+").items()):
        if name in PLACEHOLDERS or name in names.ENVIRONMENT:
            continue
        for prefix, model in (("SPECON_AGENT_", AgentSettings), ("SPECON_MANAGER_",
                                                                 ManagerSettings)):
            if name.startswith(prefix):
                field = name[len(prefix):].lower()
                fields = model.model_fields
                ok = field in fields or ((field.endswith("_") or not field) and any(
                    f.startswith(field) for f in fields))
                break
        else:
            ok = name in harness  # a switch of the test command (hack/, tests/)
        if not ok:
            problems.append(f"{name} ({', '.join(sorted(where))})")
    assert not problems, f"not a setting, a contract variable or a test switch: {problems}"


@pytest.mark.parametrize(("pod", "followed"), [
    ({"metadata": {"labels": {names.LABEL_TRAINING: "true"}}}, True),
    ({"metadata": {"annotations": {names.LABEL_TRAINING: "true"}}}, True),
    ({"spec": {"schedulerName": names.SCHEDULER_NAME}}, True),
    ({"metadata": {"labels": {names.LABEL_TRAINING: "yes"}}}, False),
    ({"spec": {"schedulerName": "default-scheduler"}}, False),
    ({"metadata": {"labels": "x", "annotations": ["y"]}, "spec": "z"}, False),
])
def test_the_agent_and_the_manager_apply_one_opt_in_rule(pod: dict, followed: bool) -> None:
    from specon_manager.job_keys import is_training_pod

    # the agent's discovery calls names.opted_in (its cases: tests/agent/test_kube_discovery.py)
    assert names.opted_in(pod) is followed
    assert is_training_pod(pod, names.SCHEDULER_NAME) is followed
