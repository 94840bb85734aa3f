"""Where the manager's Kubernetes client gets its bearer token: a fixed token, a token file
re-read as the kubelet rotates it, or a kubeconfig ``exec`` credential plugin.

Each source hands out the token for the next request (``token()``) and forgets it when the
API server answered 401 (``expire()``), so the request is retried once with a fresh one."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from specon import rfc3339

#: How often a token file is read again without a 401 (seconds). The kubelet replaces a projected
#: token at 80% of its life (an hour or more), so a few seconds' lag costs nothing.
TOKEN_FILE_RECHECK_S = 5.0
#: A plugin's token is renewed this long before its ``expirationTimestamp`` (clock skew, and
#: the time a request takes to reach the API server).
EXEC_EXPIRY_SKEW_S = 10.0
EXEC_TIMEOUT_S = 30.0
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class CredentialError(ValueError):
    """No token could be had (an unreadable token file, a failing or malformed exec plugin):
    the message says which and what to do."""


class TokenSource(Protocol):
    def token(self) -> str | None: ...

    def expire(self) -> bool:
        """Forget the token after a 401; True when a retry may get a different one."""
        ...


class StaticToken:
    """The ``token`` of a kubeconfig user: nothing to refresh."""

    def __init__(self, token: str | None) -> None:
        self._token = token or None

    def token(self) -> str | None:
        return self._token

    def expire(self) -> bool:
        return False


class TokenFile:
    """A token file (the pod's projected service-account token, a kubeconfig ``tokenFile``),
    read again every ``recheck_s`` and at once after a 401."""

    def __init__(self, path: Path | str, recheck_s: float = TOKEN_FILE_RECHECK_S) -> None:
        self.path = Path(path)
        self.recheck_s = recheck_s
        self._token: str | None = None
        self._read_at = 0.0
        self._lock = threading.Lock()

    def _read(self) -> str:
        try:
            text = self.path.read_text().strip()
        except OSError as exc:
            raise CredentialError(f"cannot read the token file {self.path}: {exc}") from exc
        if not text:
            raise CredentialError(f"the token file {self.path} is empty")
        return text

    def token(self) -> str | None:
        with self._lock:
            now = time.monotonic()
            if self._token is None or now - self._read_at >= self.recheck_s:
                try:
                    self._token = self._read()
                except CredentialError:
                    # Mid-rotation or briefly unreadable: the last token is still worth a try.
                    if self._token is None:
                        raise
                self._read_at = now
            return self._token

    def expire(self) -> bool:
        with self._lock:
            before, self._token = self._token, None
        return self.token() != before


class ExecPlugin:
    """A kubeconfig user's ``exec`` credential plugin (client.authentication.k8s.io v1 or
    v1beta1): run for a token, which is kept until shortly before its ``expirationTimestamp``
    (for ever when it has none) or until the API server refuses it (401)."""

    def __init__(self, spec: Mapping[str, Any], base_dir: Path,
                 cluster: Mapping[str, Any] | None = None,
                 timeout_s: float = EXEC_TIMEOUT_S) -> None:
        self.api_version = str(spec.get("apiVersion") or "")
        if self.api_version not in EXEC_API_VERSIONS:
            raise CredentialError(f"exec plugin apiVersion {self.api_version!r} is not "
                                  f"supported: use one of {', '.join(EXEC_API_VERSIONS)}")
        command = str(spec.get("command") or "")
        if not command:
            raise CredentialError("exec plugin without a command")
        # As kubectl does: a relative command with a path separator is relative to the
        # kubeconfig's folder; a bare name is looked up in PATH.
        if os.sep in command and not os.path.isabs(command):
            command = str(base_dir / command)
        self.argv = [command, *(str(a) for a in spec.get("args") or ())]
        self.env = {str(e["name"]): str(e["value"]) for e in spec.get("env") or ()}
        self.hint = str(spec.get("installHint") or "")
        self.cluster = dict(cluster) if spec.get("provideClusterInfo") and cluster else None
        self.timeout_s = timeout_s
        self._token: str | None = None
        self._until: float | None = None  # time.time() after which the token is renewed
        self._lock = threading.Lock()

    def _exec_info(self) -> str:
        spec: dict[str, Any] = {"interactive": False}
        if self.cluster is not None:
            spec["cluster"] = self.cluster
        return json.dumps({"apiVersion": self.api_version, "kind": "ExecCredential",
                           "spec": spec})

    def _run(self) -> tuple[str, float | None]:
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": self._exec_info()}
        try:
            out = subprocess.run(self.argv, env=env, capture_output=True, text=True,
                                 stdin=subprocess.DEVNULL, timeout=self.timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CredentialError(f"exec plugin {self.argv[0]}: {exc}"
                                  + (f" ({self.hint})" if self.hint else "")) from exc
        if out.returncode != 0:
            raise CredentialError(f"exec plugin {self.argv[0]} exited {out.returncode}: "
                                  f"{out.stderr.strip()[-300:]}")
        try:
            cred = json.loads(out.stdout)
            status = cred["status"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CredentialError(f"exec plugin {self.argv[0]} printed no ExecCredential "
                                  f"with a status: {exc}") from exc
        if cred.get("apiVersion") != self.api_version:
            raise CredentialError(f"exec plugin {self.argv[0]} answered apiVersion "
                                  f"{cred.get('apiVersion')!r}, asked {self.api_version!r}")
        token = status.get("token")
        if not token:
            # Client certificates from a plugin would need a new TLS context per renewal.
            raise CredentialError(f"exec plugin {self.argv[0]} gave no token (client "
                                  "certificates from exec plugins are not supported)")
        until = None
        if status.get("expirationTimestamp"):
            until = rfc3339.parse(str(status["expirationTimestamp"])) - EXEC_EXPIRY_SKEW_S
        return str(token), until

    def token(self) -> str | None:
        with self._lock:
            if self._token is None or (self._until is not None and time.time() >= self._until):
                self._token, self._until = self._run()
            return self._token

    def expire(self) -> bool:
        with self._lock:
            self._token = None
        return True
