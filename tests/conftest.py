"""Shared fixtures: real kernels (tests/kernels.py) and a real S3 server (tests/s3_server.py)."""

from tests.kernels import jupyter_dirs, start_kernel  # noqa: F401
from tests.s3_server import s3_env, s3_server  # noqa: F401

pytest_plugins = ["pytest_jupyter.jupyter_server"]
