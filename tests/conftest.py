"""Shared fixtures: real kernels (tests/kernels.py), a real S3 server (tests/s3_server.py), and a
clean slate of this process's session state (``new_process``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jupyter_pause.engine import lineage, probe
from tests.kernels import jupyter_dirs, start_kernel  # noqa: F401
from tests.s3_server import s3_env, s3_server  # noqa: F401

pytest_plugins = ["pytest_jupyter.jupyter_server"]


@pytest.fixture
def new_process() -> Iterator[None]:
    """The test runs as a fresh kernel would: no lineage position, no probe value held."""
    lineage.forget()
    probe.forget()
    yield
    lineage.forget()
    probe.forget()
