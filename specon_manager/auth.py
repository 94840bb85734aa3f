"""Agent authentication: a bearer token names the one node it may speak for."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path


class TokenError(ValueError):
    """The tokens file cannot be used (says which line and why)."""


def _digest(token: str) -> str:
    # Tokens are looked up by digest, so a lookup's timing says nothing about a token's prefix.
    return hashlib.sha256(token.encode()).hexdigest()


class NodeTokens:
    """token -> node. Built from a mapping or a file of ``TOKEN NODE`` lines."""

    def __init__(self, tokens: Mapping[str, str] | None = None) -> None:
        self._by_digest: dict[str, str] = {}
        for token, node in (tokens or {}).items():
            self.add(token, node)

    def add(self, token: str, node: str) -> None:
        if len(token) < 16:
            raise TokenError("a token must be at least 16 characters long")
        self._by_digest[_digest(token)] = node

    def node_for(self, token: str) -> str | None:
        return self._by_digest.get(_digest(token))

    def __len__(self) -> int:
        return len(self._by_digest)

    @classmethod
    def from_file(cls, path: Path) -> NodeTokens:
        out = cls()
        for no, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                raise TokenError(f"{path.name}:{no}: expected 'TOKEN NODE', got {len(parts)} "
                                 "fields")
            try:
                out.add(parts[0], parts[1])
            except TokenError as exc:
                raise TokenError(f"{path.name}:{no}: {exc}") from None
        return out
