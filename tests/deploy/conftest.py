"""Fixtures of tests/deploy: the Docker Engine and the local base image (tests/dockerlib.py),
for test_images.py."""

from dockerlib import base_image, engine  # noqa: F401  (re-exported for pytest)
