"""Who is on the other end of the extender's mutual TLS (issue 29, item 6).

A certificate the CA signed is not enough: the chart's generated serving certificate is signed
by the same CA and, like every certificate Helm's ``genSignedCert`` makes, carries the
clientAuth usage too. So the extender port also checks the client certificate's *name*: its
subject CN or a DNS subjectAltName must be one of ``extender_client_names`` (the chart: the
scheduler's, ``<release>-specon-scheduler``). Any other certificate -- the manager's own
serving certificate above all -- has its connection closed right after the handshake, before
a byte of HTTP is read, with a warning that names it.

The check sits in the connection's protocol (uvicorn's ``http`` class, subclassed): asyncio
calls ``connection_made`` only once the TLS handshake, with the client certificate verified
against the CA, is complete, and the verified certificate is the transport's ``peercert``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger("specon_manager.peer")


def peer_names(cert: Any) -> set[str]:
    """The names a verified peer certificate (``SSLSocket.getpeercert()``'s dict) stands
    for: its subject's commonName(s) and its DNS subjectAltNames."""
    if not isinstance(cert, dict):
        return set()
    names: set[str] = set()
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                names.add(str(value))
    for kind, value in cert.get("subjectAltName", ()):
        if kind == "DNS":
            names.add(str(value))
    return names


def describe(cert: Any) -> str:
    names = sorted(peer_names(cert))
    return ", ".join(names) if names else "no certificate or no name"


def name_checked(base: type[asyncio.Protocol], allowed: Iterable[str],
                 port: int) -> type[asyncio.Protocol]:
    """``base`` (a uvicorn HTTP protocol class) that first checks the peer's certificate
    names against ``allowed`` and closes the connection of any other peer."""
    want = frozenset(allowed)

    class NameChecked(base):  # type: ignore[valid-type,misc]
        _refused = False

        def connection_made(self, transport: asyncio.Transport) -> None:
            cert = transport.get_extra_info("peercert")
            if not peer_names(cert) & want:
                self._refused = True
                peer = transport.get_extra_info("peername")
                log.warning(
                    "extender port %d: refused the client certificate of %s (%s): not "
                    "named as the scheduler (extender_client_names: %s)", port,
                    peer[0] if isinstance(peer, tuple) and peer else "?", describe(cert),
                    ", ".join(sorted(want)))
                transport.abort()
                return
            super().connection_made(transport)

        def data_received(self, data: bytes) -> None:
            if not self._refused:
                super().data_received(data)

        def eof_received(self) -> bool | None:
            if self._refused:
                return None
            return super().eof_received()  # type: ignore[no-any-return]

        def connection_lost(self, exc: Exception | None) -> None:
            if not self._refused:
                super().connection_lost(exc)

    NameChecked.__name__ = NameChecked.__qualname__ = f"NameChecked{base.__name__}"
    return NameChecked
