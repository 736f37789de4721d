"""jupyter_pause.proof.fingerprint: what changed since the checkpoint, and which process took it."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

import numpy

from jupyter_pause.proof import fingerprint

ROOT = Path(__file__).resolve().parents[2]


def saved() -> dict:
    return {
        "python": "3.11.7",
        "implementation": "CPython",
        "platform": "Linux-x86_64",
        "node": "gpu-1",
        "packages": {"torch": "2.3.0", "numpy": "1.26.4", "dill": "0.3.8"},
        "cuda": "12.1",
        "gpu_count": 2,
    }


def test_equal_fingerprints_have_no_differences() -> None:
    assert fingerprint.differences(saved(), saved()) == []
    assert fingerprint.differences({}, {}) == []


def test_changed_python_and_package_versions_are_listed() -> None:
    now = saved()
    now["python"] = "3.12.1"
    now["packages"] = {"torch": "2.4.0", "numpy": "1.26.4", "dill": "0.3.8"}
    notes = fingerprint.differences(saved(), now)
    assert notes == [
        "python: 3.11.7 at checkpoint, 3.12.1 now",
        "torch: 2.3.0 at checkpoint, 2.4.0 now",
    ]


def test_packages_gone_or_new_and_other_keys_are_listed() -> None:
    now = saved()
    now["packages"] = {"torch": "2.3.0", "numpy": "1.26.4", "pandas": "2.2.0"}
    now["gpu_count"] = 0
    del now["cuda"]
    notes = fingerprint.differences(saved(), now)
    assert "dill: 0.3.8 at checkpoint, absent now" in notes
    assert "pandas: absent at checkpoint, 2.2.0 now" in notes
    assert "gpu_count: 2 at checkpoint, 0 now" in notes
    assert "cuda: 12.1 at checkpoint, None now" in notes
    assert len(notes) == 4


def test_environment_describes_this_process() -> None:
    env = fingerprint.environment("node-a")
    assert env["python"] == platform.python_version()
    assert env["node"] == "node-a"
    assert env["packages"]["numpy"] == numpy.__version__
    assert fingerprint.differences(env, fingerprint.environment("node-a")) == []


def test_process_identity_has_pid_and_token() -> None:
    identity = fingerprint.process_identity()
    assert identity["pid"] == os.getpid()
    assert identity["host"] == socket.gethostname()
    assert isinstance(identity["token"], str) and len(identity["token"]) == 32
    assert isinstance(identity["start"], float)
    assert fingerprint.process_identity() == identity  # stable within a process


def test_another_process_has_another_identity() -> None:
    code = "import json; from jupyter_pause.proof import fingerprint; print(json.dumps(fingerprint.process_identity()))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    ).stdout
    other = json.loads(out)
    mine = fingerprint.process_identity()
    assert other["pid"] != mine["pid"]
    assert other["token"] != mine["token"]
