"""Fixtures of the tests on the real Docker Engine (tests/dockerlib.py)."""

from dockerlib import base_image, burner, engine  # noqa: F401  (re-exported for pytest)
