"""What installing the package gives: both extensions enabled, the front end built and found."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


def _jupyter(*args: str) -> str:
    done = subprocess.run(
        [str(BIN / "jupyter"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_labextension_is_installed_and_enabled(jupyter_dirs):
    listing = _jupyter("labextension", "list")
    line = next((ln for ln in listing.splitlines() if "jupyter-pause" in ln), "")
    assert "enabled" in line and "OK" in line, listing


def test_server_extension_is_enabled_by_installing(jupyter_dirs):
    listing = _jupyter("server", "extension", "list")
    assert "jupyter_pause" in listing and "enabled" in listing.split("jupyter_pause", 1)[1].splitlines()[0]


def test_jupyter_pause_subcommand_has_help(jupyter_dirs):
    out = _jupyter("pause", "--help")
    for command in ("list", "show", "verify", "gc", "report", "drill"):
        assert command in out
