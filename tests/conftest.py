"""Shared pytest set-up: the real Kubernetes test plane's fixtures and hooks (tests/planelib.py)."""

from planelib import (  # noqa: F401  (re-exported so that pytest registers them)
    plane,
    plane_bin,
    plane_namespace,
    pytest_collection_modifyitems,
    pytest_runtest_makereport,
    pytest_terminal_summary,
)
