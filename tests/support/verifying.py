"""What the fault-injection suite checks after each fault: the store's own ``jupyter pause verify``, run
as a separate process, and a cell waited on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.tally import TALLY

ROOT = Path(__file__).resolve().parents[2]


def cli_verify(
    store: str | Path, session: str | None = None, env: dict[str, str] | None = None
) -> tuple[int, list[dict]]:
    """``jupyter pause verify --json --store S``, as a separate process: (exit code, rows)."""
    command = [sys.executable, "-m", "jupyter_pause.cli", "verify", "--json", "--store", str(store)]
    if session:
        command += ["--session", session]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert done.returncode in (0, 1), f"verify failed to run ({done.returncode}):\n{done.stderr}"
    return done.returncode, json.loads(done.stdout)


def check_verify_rows(rows: list[dict], sizes: dict[str, int]) -> tuple[list[dict], list[dict]]:
    """Split verify rows into committed and incomplete, and count committed ones that fail.

    A committed checkpoint that does not verify is data lost: it is counted (with its bytes from
    ``sizes``, by id) before the caller asserts there is none.
    """
    committed = [r for r in rows if not r.get("incomplete")]
    incomplete = [r for r in rows if r.get("incomplete")]
    bad = [r for r in committed if not r["ok"]]
    TALLY.committed_checked += len(committed)
    TALLY.lost(len(bad), sum(sizes.get(r["id"], 1) for r in bad))
    return committed, incomplete


def wait_cell(kernel: Any, msg_id: str, timeout: float = 120) -> Any:
    """The outcome of a cell started with ``kernel.send``."""
    return kernel.collect(msg_id, timeout)
