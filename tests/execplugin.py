"""A tiny kubeconfig ``exec`` credential plugin for tests: a Python script that prints an
ExecCredential (in the apiVersion it was asked for) holding the token in the file ``token``
beside it, and logs each run's KUBERNETES_EXEC_INFO to ``runs``. ``write(folder, ...)`` puts
the script, the token, a copy of the CA and a kubeconfig whose paths are relative to the folder
(``./plugin.py``, ``ca.crt``), as kubeconfigs shipped with their files are written."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import yaml

SCRIPT = """#!{python}
import datetime, json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
with open(os.path.join(here, "runs"), "a") as f:
    f.write(json.dumps(info) + "\\n")
with open(os.path.join(here, "token")) as f:
    status = {{"token": f.read().strip()}}
if len(sys.argv) > 1:  # the token's life in seconds
    now = datetime.datetime.now(datetime.timezone.utc)
    expires = now + datetime.timedelta(seconds=int(sys.argv[1]))
    status["expirationTimestamp"] = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                  "status": status}}))
"""


def write(folder: Path, server: str, ca_file: Path, token: str,
          api_version: str = "client.authentication.k8s.io/v1",
          life_s: int | None = None) -> Path:
    """The kubeconfig (``folder/kubeconfig``) of a user whose token comes from the plugin."""
    folder.mkdir(parents=True, exist_ok=True)
    plugin = folder / "plugin.py"
    plugin.write_text(SCRIPT.format(python=sys.executable))
    plugin.chmod(0o755)
    (folder / "token").write_text(token)
    shutil.copy(ca_file, folder / "ca.crt")
    user = {"exec": {"apiVersion": api_version, "command": "./plugin.py",
                     "args": [] if life_s is None else [str(life_s)],
                     "interactiveMode": "Never", "provideClusterInfo": True}}
    doc = {"apiVersion": "v1", "kind": "Config",
           "clusters": [{"name": "plane", "cluster": {"server": server,
                                                       "certificate-authority": "ca.crt"}}],
           "users": [{"name": "plugged", "user": user}],
           "contexts": [{"name": "plugged", "context": {"cluster": "plane", "user": "plugged"}}],
           "current-context": "plugged"}
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def runs(folder: Path) -> list[dict[str, object]]:
    """The KUBERNETES_EXEC_INFO of each run so far."""
    log = folder / "runs"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
