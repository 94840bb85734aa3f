"""The `specon-manager` command and its drain hook, run as real processes: 2 and one line for
bad input (an argument, a TLS file, a named kubeconfig), 1 and one line when it cannot start
(not in a pod with no kubeconfig, a port taken), `--version` (issue 30)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from specon.version import version


def run(module: str, *args: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("SPECON_MANAGER_") and k != "KUBERNETES_SERVICE_HOST"}
    return subprocess.run([sys.executable, "-m", module, *args], env={**clean, **(env or {})},
                          capture_output=True, text=True, timeout=60)


def one_line(r: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_version() -> None:
    r = run("specon_manager", "--version")
    assert r.returncode == 0 and r.stdout == f"specon-manager {version()}\n", r.stderr


def test_an_argument_exits_2() -> None:
    r = run("specon_manager", "--port", "9000", env={"SPECON_MANAGER_KUBERNETES": "false"})
    assert r.returncode == 2
    assert one_line(r) == ("specon-manager: takes no arguments (got '--port 9000'): it is "
                           "configured by SPECON_MANAGER_* environment variables "
                           "(docs/manager.md)")


@pytest.mark.parametrize("which", ["missing", "not PEM"])
def test_tls_files_that_cannot_be_used_exit_2(tmp_path: Path, which: str) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    if which == "not PEM":
        cert.write_text("not a certificate\n")
        key.write_text("not a key\n")
    r = run("specon_manager", env={"SPECON_MANAGER_KUBERNETES": "false",
                                   "SPECON_MANAGER_TLS_CERT_FILE": str(cert),
                                   "SPECON_MANAGER_TLS_KEY_FILE": str(key)})
    assert r.returncode == 2
    line = one_line(r)
    if which == "missing":
        assert line == f"specon-manager: tls_cert_file {cert}: cannot read (No such file or " \
            "directory)"
    else:
        assert line.startswith(f"specon-manager: tls_cert_file {cert} and tls_key_file {key}: "
                               "not a PEM certificate and its key")


def test_kubeconfig_that_cannot_be_used_exits_2(tmp_path: Path) -> None:
    env = {"SPECON_MANAGER_AGENT_SERVICE_ACCOUNTS": '["specon-system:specon-agent"]'}
    r = run("specon_manager", env={**env, "SPECON_MANAGER_KUBECONFIG": str(tmp_path / "no")})
    assert r.returncode == 2
    assert one_line(r) == (f"specon-manager: kubeconfig {tmp_path / 'no'}: cannot read: No "
                           "such file or directory")
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\n")
    r = run("specon_manager", env={**env, "SPECON_MANAGER_KUBECONFIG": str(bad)})
    assert r.returncode == 2 and "not a usable kubeconfig" in one_line(r)


def test_outside_a_pod_without_a_kubeconfig_exits_1() -> None:
    r = run("specon_manager",
            env={"SPECON_MANAGER_AGENT_SERVICE_ACCOUNTS": '["specon-system:specon-agent"]'})
    assert r.returncode == 1
    assert one_line(r).startswith("specon-manager: not in a pod (KUBERNETES_SERVICE_HOST is "
                                  "unset) and no kubeconfig given: set SPECON_MANAGER_KUBECONFIG")


def test_a_port_taken_exits_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run("specon_manager", env={"SPECON_MANAGER_KUBERNETES": "false",
                                       "SPECON_MANAGER_HOST": "127.0.0.1",
                                       "SPECON_MANAGER_PORT": str(port)})
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "address already in use" in r.stderr
    assert r.stderr.splitlines()[-1] == ("specon-manager: a listener could not start (its "
                                         "error is logged above)")


def test_drain_without_api_access(tmp_path: Path) -> None:
    args = ("--namespace", "specon-system", "--daemonset", "specon-agent",
            "--selector", "app=specon-agent")
    r = run("specon_manager.drain", *args)
    assert r.returncode == 1
    assert one_line(r).startswith("specon-manager drain: no API access: not in a pod")
    r = run("specon_manager.drain", *args, "--kubeconfig", str(tmp_path / "no"))
    assert r.returncode == 2
    assert one_line(r) == (f"specon-manager drain: no API access: kubeconfig {tmp_path / 'no'}: "
                           "cannot read: No such file or directory")
    r = run("specon_manager.drain", "--namespace", "x")
    assert r.returncode == 2 and "Traceback" not in r.stderr  # argparse's usage and error
