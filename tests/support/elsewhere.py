"""A notebook cell built in this test's process, then resumed in a new process in another folder.

For the fidelity tests (``test_registry.py``, ``test_libraries.py``): ``build`` runs a cell as a
notebook would, in a folder of its own; ``resume_elsewhere`` runs a script in a new Python process
in folder ``c``, with the store, the batch's name and folder ``b`` (for an uninterrupted twin) as
its arguments, and returns the JSON it prints on its ``REPORT`` line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def build(code: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Run ``code`` as a notebook cell (``__name__ == "__main__"``) in a new ``folder``; its namespace."""
    folder.mkdir()
    monkeypatch.chdir(folder)
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(textwrap.dedent(code), "<cell>", "exec", dont_inherit=True), ns)
    return ns


def resume_elsewhere(script: str, store: Path, batch: str, tmp_path: Path, timeout: float) -> dict[str, Any]:
    """Run ``script`` in a new process in ``tmp_path/c`` (the twin's folder ``tmp_path/b``); its report."""
    for folder in ("b", "c"):
        (tmp_path / folder).mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(store), batch, str(tmp_path / "b")],
        capture_output=True,
        text=True,
        cwd=tmp_path / "c",
        env=env,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT "))
    return json.loads(line[len("REPORT ") :])
