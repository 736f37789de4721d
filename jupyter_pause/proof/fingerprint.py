"""Who took a checkpoint and where: the environment fingerprint and the kernel process identity."""

from __future__ import annotations

import functools
import os
import platform
import secrets
import socket
import sys
import time
from importlib import metadata
from typing import Any

from . import hardware

#: Packages whose versions decide whether pickled state loads the same way.
PACKAGES = ("jupyter-pause", "torch", "numpy", "dill", "ipykernel", "fsspec", "pandas")

#: A value that exists only in this process's memory: a new process cannot know it.
PROCESS_TOKEN = secrets.token_hex(16)


def _process_start_time(pid: int) -> float | None:
    """Start time of ``pid`` in clock ticks since boot (Linux), so pid reuse is told apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return float(fields[19])
    except (OSError, IndexError, ValueError):
        return None


_IMPORT_TIME = time.time()


def process_identity() -> dict[str, Any]:
    """pid, process start time, host and the in-memory token of this kernel process."""
    pid = os.getpid()
    start = _process_start_time(pid)
    return {
        "pid": pid,
        "start": start if start is not None else _IMPORT_TIME,
        "host": socket.gethostname(),
        "token": PROCESS_TOKEN,
    }


@functools.lru_cache(maxsize=None)
def version(package: str) -> str | None:
    """The installed version of ``package`` (looked up once per process: reading package
    metadata takes milliseconds, and every checkpoint records it)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def environment(node: str) -> dict[str, Any]:
    """Python, key package versions, torch/CUDA versions, GPU model and count, node name, and
    the hardware a forward pass runs on (``hardware.describe``)."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "node": node,
        "packages": {p: v for p in PACKAGES if (v := version(p)) is not None},
    }
    if "torch" in sys.modules:
        import torch

        env["cuda"] = torch.version.cuda
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        env["gpu_count"] = count
        # Device names need an initialised CUDA context; only ask when the session has one.
        if count and torch.cuda.is_initialized():
            env["gpus"] = [torch.cuda.get_device_name(i) for i in range(count)]
    env["hardware"] = hardware.describe()
    return env


def differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Human-readable differences between two fingerprints (empty when they match)."""
    notes = []
    for key in sorted(set(saved) | set(current)):
        if key in ("packages", "hardware"):
            continue
        if saved.get(key) != current.get(key):
            notes.append(f"{key}: {saved.get(key)} at checkpoint, {current.get(key)} now")
    old, new = saved.get("packages", {}), current.get("packages", {})
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            notes.append(f"{name}: {old.get(name) or 'absent'} at checkpoint, {new.get(name) or 'absent'} now")
    if "hardware" in saved and "hardware" in current and hardware.moved(saved["hardware"], current["hardware"]):
        notes.append(f"hardware: resumed {hardware.where(saved['hardware'], current['hardware'])}")
    return notes
