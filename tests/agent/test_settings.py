"""The agent's settings: flags over environment over config file over the shipped defaults, and
unusable settings refused in one line with exit status 2 (no traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specon import defaults
from specon_agent.settings import SettingsProblem, load_settings


def test_defaults_are_the_shipped_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECON_AGENT_CONFIG", raising=False)
    s = load_settings([])
    assert (s.alpha, s.interval_s, s.flowcon_alpha, s.flowcon_beta) == (
        defaults.ALPHA, defaults.INTERVAL_S, defaults.FLOWCON_ALPHA, defaults.FLOWCON_BETA)
    assert s.mode == "standalone"
    assert s.label == "specon.io/training"


def test_flags_over_environment_over_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("alpha: 0.2\ninterval-s: 45\nnode_name: from-file\npoll_s: 3\n")
    monkeypatch.setenv("SPECON_AGENT_INTERVAL_S", "20")
    monkeypatch.setenv("SPECON_AGENT_NODE_NAME", "from-env")
    s = load_settings(["--config", str(cfg), "--node-name", "from-flag"])
    assert s.alpha == 0.2  # only the file says it
    assert s.interval_s == 20  # env beats the file
    assert s.node_name == "from-flag"  # the flag beats both
    assert s.poll_s == 3
    monkeypatch.setenv("SPECON_AGENT_CONFIG", str(cfg))
    assert load_settings([]).alpha == 0.2  # the file can be named by the environment too


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--bogus", "1"], "unrecognized arguments: --bogus"),
        (["--alpha", "-1"], "alpha: Input should be greater than 0"),
        (["--mode", "cluster"], "cluster mode needs manager_url"),
        (["--mode", "swarm"], "mode: Input should be 'standalone' or 'cluster'"),
        (["--config", "/nonexistent/agent.yaml"], "config file /nonexistent/agent.yaml"),
    ],
)
def test_unusable_settings_are_one_clear_line(argv: list[str], says: str) -> None:
    with pytest.raises(SettingsProblem, match=says.replace("(", r"\(")):
        load_settings(argv)


def test_a_config_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    for text, says in (("- 1\n- 2\n", "must be a mapping"), ("alpha: [1\n", "not YAML"),
                       ("unknown_key: 1\n", "unknown_key")):
        cfg = tmp_path / "bad.yaml"
        cfg.write_text(text)
        with pytest.raises(SettingsProblem, match=says):
            load_settings(["--config", str(cfg)])


def test_the_command_exits_2_with_one_line_and_no_traceback() -> None:
    r = subprocess.run([sys.executable, "-m", "specon_agent", "--poll-s", "zero"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("specon-agent: poll_s:")
    assert "Traceback" not in r.stderr


def test_help_lists_the_settings() -> None:
    r = subprocess.run([sys.executable, "-m", "specon_agent", "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    for flag in ("--mode", "--actuator", "--manager-url", "--token-file", "--interval-s",
                 "--restore-on-exit"):
        assert flag in r.stdout


def test_a_bad_value_in_the_file_names_the_file_and_the_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECON_AGENT_CONFIG", raising=False)
    monkeypatch.delenv("SPECON_AGENT_POLL_S", raising=False)
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("poll-s: 0\n")
    with pytest.raises(SettingsProblem) as err:
        load_settings(["--config", str(cfg)])
    assert str(err.value) == f"config file {cfg}: poll_s: Input should be greater than 0"
    # the same field set by a flag is the flag's error, not the file's
    with pytest.raises(SettingsProblem, match=r"^poll_s: Input should be less than or equal"):
        load_settings(["--config", str(cfg), "--poll-s", "61"])
    # an unknown key names the file too
    cfg.write_text("pol_s: 1\n")
    with pytest.raises(SettingsProblem, match=rf"^config file {cfg}: pol_s: Extra inputs"):
        load_settings(["--config", str(cfg)])


def test_an_empty_file_or_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECON_AGENT_CONFIG", raising=False)
    cfg = tmp_path / "empty.yaml"
    cfg.write_text("")
    assert load_settings(["--config", str(cfg)]).alpha == defaults.ALPHA
    with pytest.raises(SettingsProblem, match=f"config file {tmp_path}: Is a directory"):
        load_settings([f"--config={tmp_path}"])


def test_version_prints_the_package_version() -> None:
    from specon.version import version

    r = subprocess.run([sys.executable, "-m", "specon_agent", "--version"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout == f"specon-agent {version()}\n"
