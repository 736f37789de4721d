"""``jupyter pause drill``: the demo notebook passes end to end; bad notebooks fail clearly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.integration

DEMO = Path(__file__).resolve().parents[2] / "notebooks" / "demo_training.ipynb"


def _drill(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_pause.cli", "drill", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


def _notebook(path: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, str(path))
    return path


@pytest.mark.parametrize("kill", [True, False], ids=["sigkill", "shutdown"])
def test_demo_notebook_drill_is_restored(jupyter_dirs, tmp_path, kill):
    report = tmp_path / "report.json"
    args = [str(DEMO), "--store", str(tmp_path / "store"), "--report", str(report)]
    done = _drill(*args, *(["--kill"] if kill else []), env=jupyter_dirs)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verdict: restored   probe: back   check cell: passed" in done.stdout
    assert "resume to next cell" in done.stdout
    data = json.loads(report.read_text())
    assert data["verdict"] == "restored" and data["drill"]["kill"] is kill
    assert data["durations"]["resume_to_next_cell"] > 0 and "model" in data["restored"]
    assert all(
        data["moments"][m] is not None for m in ("checkpoint_committed", "kernel_stopped", "kernel_ready", "verified")
    )
    # The notebook document itself went into the checkpoint.
    assert "notebook demo_training.ipynb saved as on disk" in done.stdout


def test_drill_stops_at_the_failing_cell(jupyter_dirs, tmp_path):
    nb = _notebook(tmp_path / "bad.ipynb", "x = 1", "raise ValueError('boom in cell two')", "y = 2")
    done = _drill(str(nb), "--store", str(tmp_path / "store"), env=jupyter_dirs)
    assert done.returncode == 2
    assert (
        "cell 2 (" in done.stderr
        and "raise ValueError" in done.stderr
        and "ValueError: boom in cell two" in done.stderr
    )


@pytest.mark.parametrize("kind", ["missing", "folder", "not-json"])
def test_drill_on_something_that_is_not_a_notebook(jupyter_dirs, tmp_path, kind):
    target = tmp_path / "x.ipynb"
    if kind == "folder":
        target.mkdir()
    elif kind == "not-json":
        target.write_text("print('I am a script')")
    done = _drill(str(target), "--store", str(tmp_path / "store"), env=jupyter_dirs)
    assert done.returncode == 2
    expected = {"missing": "no such file", "folder": "is a folder", "not-json": "is not a notebook"}[kind]
    assert expected in done.stderr and "Traceback" not in done.stderr
