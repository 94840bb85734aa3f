"""Certificates for the tests' TLS (the manager's serving certificate, kube-scheduler's client
certificate), made with the openssl command line as the test plane makes its own."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def make_ca(folder: Path, name: str) -> Pair:
    """A self-signed CA ``name.crt`` / ``name.key`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=folder)
    _openssl("req", "-x509", "-new", "-key", f"{name}.key", "-days", "2", "-subj",
             f"/CN={name}", "-out", f"{name}.crt", cwd=folder)
    return Pair(folder / f"{name}.crt", folder / f"{name}.key")


def issue(folder: Path, ca: Pair, name: str, cn: str, sans: tuple[str, ...] = (),
          client: bool = False) -> Pair:
    """A certificate signed by ``ca``: for a server (``sans``: ``IP:...``/``DNS:...``) or, with
    ``client``, for a client."""
    _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=folder)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", f"/CN={cn}", "-out",
             f"{name}.csr", cwd=folder)
    ext = [f"extendedKeyUsage={'clientAuth' if client else 'serverAuth'}",
           "keyUsage=digitalSignature,keyEncipherment"]
    if sans:
        ext.append("subjectAltName=" + ",".join(sans))
    (folder / f"{name}.ext").write_text("\n".join(ext) + "\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca.cert), "-CAkey", str(ca.key),
             "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
             cwd=folder)
    return Pair(folder / f"{name}.crt", folder / f"{name}.key")
