"""Shared fixtures: real kernels (tests/kernels.py) and a real S3 server (tests/s3_server.py)."""

from tests.kernels import jupyter_dirs, start_kernel  # noqa: F401
