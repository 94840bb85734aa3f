"""Every `specon` command the README shows works (issue 30): the README's command to record a
profile once failed with "Missing option '--name'" and no test noticed.

The commands are read from the README itself: each line of a fenced code block whose command
(or one of its `&&` parts) is `specon …` or `…/specon …`, and each table cell that is one
code span `specon …`. Each must appear in HOW below, which says how it is checked:

- run for real, as written or with smaller arguments (`--seeds 1` or `2`, `--no-plots`) to
  keep this test under a minute on a shared two-core machine; the rewrite is given beside it.
- parsed only: `specon profile record -- python3 -m specon_examples.vae …` needs PyTorch for
  the job and takes minutes (a reference run, then 3 timed samples per core count). It goes
  through the real command line with the recording itself replaced, which checks the flags,
  the default profile name (vae), the job's command as passed, and the file written (vae.json);
  the job's own arguments are checked by its parser (`--help` after them: no torch needed).
  A recording for real is tested with a small job in tests/examples/test_recorder.py.

A new README command fails `test_every_readme_command_is_covered` until it is added here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

RUN = "run"
PARSE = "parse"

#: README command -> (how, the arguments run instead or None for "as written").
HOW: dict[str, tuple[str, list[str] | None]] = {
    "specon simulate": (RUN, ["simulate", "--seeds", "1", "--no-plots"]),
    "specon simulate paper-30 --seeds 10": (RUN, ["simulate", "paper-30", "--seeds", "1",
                                                  "--no-plots"]),
    "specon simulate paper-30-mc --seeds 10": (RUN, ["simulate", "paper-30-mc", "--seeds",
                                                     "1", "--no-plots"]),
    "specon simulate paper-30 --seeds 10 --manager-view": (RUN, [
        "simulate", "paper-30", "--seeds", "1", "--no-plots", "--manager-view"]),
    "specon simulate paper-30-mc --seeds 10 --manager-view": (RUN, [
        "simulate", "paper-30-mc", "--seeds", "1", "--no-plots", "--manager-view"]),
    "specon profile record -- python3 -m specon_examples.vae --iterations 2000": (PARSE, None),
    "specon validate my-workload.json": (RUN, None),
    "specon simulate my-workload.json --seeds 10 --out results/mine": (
        RUN, ["simulate", "my-workload.json", "--seeds", "2", "--out", "results/mine"]),
    "specon generate 7 --out random-7.json": (RUN, None),
}


def readme_commands() -> list[str]:
    text = README.read_text()
    found: list[str] = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():  # continuation lines joined
            line = re.sub(r"\s+#.*$", "", line).strip()
            for part in line.split("&&"):
                words = shlex.split(part)
                if words and (words[0] == "specon" or words[0].endswith("/specon")):
                    found.append(shlex.join(["specon", *words[1:]]))
    for cell in re.findall(r"^\|.*\|$", text, flags=re.M):
        for span in re.findall(r"\|\s*`(specon [^`]*)`\s*(?=\|)", cell):
            found.append(span.strip())
    return list(dict.fromkeys(found))


def specon(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])))
    return subprocess.run([sys.executable, "-m", "specon", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120)


def test_every_readme_command_is_covered():
    commands = readme_commands()
    assert "specon profile record -- python3 -m specon_examples.vae --iterations 2000" in commands
    assert len(commands) >= 7, commands
    missing = [c for c in commands if c not in HOW]
    assert not missing, f"README commands not checked here (add them to HOW): {missing}"
    stale = [c for c in HOW if c not in commands]
    assert not stale, f"no longer in the README (remove from HOW): {stale}"


def test_readme_commands_run(tmp_path: Path):
    # "my-workload.json" stands for the reader's own file: a small random one here
    setup = specon(["generate", "3", "--workers", "2-2", "--cpus", "2-4", "--jobs", "6-6",
                    "--out", "my-workload.json"], tmp_path)
    assert setup.returncode == 0, setup.stderr
    ran = []
    for command in readme_commands():
        how, args = HOW[command]
        if how != RUN:
            continue
        argv = args if args is not None else shlex.split(command)[1:]
        r = specon(argv, tmp_path)
        assert r.returncode == 0, (command, argv, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr
        ran.append(command)
    assert len(ran) == 8
    assert (tmp_path / "results" / "paper-30" / "result.json").exists()
    assert (tmp_path / "results" / "paper-30-mc" / "result.json").exists()
    assert (tmp_path / "results" / "mine" / "summary.png").exists()
    assert json.loads((tmp_path / "random-7.json").read_text())["format"] == \
        "specon-workload/v1"


def test_readme_record_command_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from specon import cli, recorder

    command = next(c for c in readme_commands() if c.startswith("specon profile record"))
    assert HOW[command][0] == PARSE
    argv = shlex.split(command)[1:]
    calls: list[dict[str, Any]] = []

    def fake_record(job: list[str], name: str, cores: list[int], *rest: Any,
                    **kw: Any) -> dict[str, Any]:
        calls.append({"job": list(job), "name": name, "cores": cores})
        return {"name": name}

    monkeypatch.setattr(recorder, "record_profile", fake_record)
    monkeypatch.chdir(tmp_path)
    code = cli.app(argv, prog_name="specon", standalone_mode=False)
    assert code in (None, 0)
    job = ["python3", "-m", "specon_examples.vae", "--iterations", "2000"]
    assert calls == [{"job": job, "name": "vae",
                      "cores": recorder.default_cores(len(recorder.available_cpus()))}]
    assert json.loads((tmp_path / "vae.json").read_text()) == {"name": "vae"}
    # the job's own arguments, by its own parser (it imports torch only after parsing)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([*job, "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and "--iterations" in r.stdout, r.stderr
