"""The package's version, for every command's `--version` (the standard library alone, so the
agent's and the manager's images need nothing more)."""

from __future__ import annotations


def version() -> str:
    """The installed package's version; from a source tree that is not installed, the
    version the source itself declares."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("specon")
    except PackageNotFoundError:
        import specon

        return f"{specon.__version__} (source tree, not installed)"
