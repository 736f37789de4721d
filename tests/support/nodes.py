"""Nodes played by folders: each with its own HOME, Hugging Face cache and temporary folder.

``Node.run`` runs a script in a new Python process as that node would (its variables point into
its own folders, the datasets libraries offline) and returns the JSON it prints on its
``REPORT`` line; ``Node.leave`` moves the node's folders away, as another node would not have them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Node:
    """One node's folders under ``root``: ``home``, ``home/hf`` (HF_HOME), ``tmp``, ``nb`` (where it runs)."""

    root: Path

    def __post_init__(self) -> None:
        for name in ("home", "tmp", "nb"):
            (self.root / name).mkdir(parents=True, exist_ok=True)

    @property
    def env(self) -> dict[str, str]:
        """The environment of a process on this node."""
        kept = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "XDG_", "JUPYTER_PAUSE_"))}
        return {
            **kept,
            "HOME": str(self.root / "home"),
            "HF_HOME": str(self.root / "home" / "hf"),
            "TMPDIR": str(self.root / "tmp"),
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "PYTHONPATH": str(ROOT),
        }

    def run(self, script: str, *args: str, timeout: float = 180) -> dict[str, Any]:
        """Run ``script`` (with ``args``) in a new process here; the JSON of its ``REPORT`` line."""
        proc = subprocess.run(
            [sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            cwd=self.root / "nb",
            env=self.env,
            timeout=timeout,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT "))
        return json.loads(line[len("REPORT ") :])

    def leave(self) -> None:
        """Move this node's folders away: no other node has them."""
        self.root.rename(self.root.with_name(self.root.name + ".gone"))
