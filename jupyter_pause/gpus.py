"""Which GPUs this process can use (model and count), without importing torch or starting CUDA.

The ledger records them with every event. A kernel that has initialised CUDA asks torch (exact);
anything else reads the NVIDIA driver's list (``/proc/driver/nvidia/gpus``, else ``nvidia-smi``)
and keeps the devices ``CUDA_VISIBLE_DEVICES`` lets this process see, as CUDA would.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys

#: Where the NVIDIA driver lists the node's GPUs, one folder each (by PCI bus id).
DRIVER = "/proc/driver/nvidia/gpus"
#: Seconds ``nvidia-smi`` may take to answer.
SMI_TIMEOUT = 5.0


@functools.lru_cache(maxsize=1)
def installed() -> tuple[str, ...]:
    """Models of the node's NVIDIA GPUs in PCI bus order (empty when there are none, or no driver)."""
    models = []
    for info in sorted(glob.glob(f"{DRIVER}/*/information")):
        try:
            with open(info) as f:
                for line in f:
                    name, _, value = line.partition(":")
                    if name.strip() == "Model":
                        models.append(value.strip())
                        break
        except OSError:
            continue
    if models or shutil.which("nvidia-smi") is None:
        return tuple(models)
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=SMI_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(line.strip() for line in done.stdout.splitlines() if line.strip()) if done.returncode == 0 else ()


def _visible(models: tuple[str, ...], setting: str | None) -> list[str]:
    """The models ``CUDA_VISIBLE_DEVICES`` (``setting``) leaves visible, in CUDA's order."""
    if setting is None:
        return list(models)
    seen = []
    for item in setting.split(","):
        item = item.strip()
        if not item:
            break
        if item.lstrip("-").isdigit():
            index = int(item)
            if not 0 <= index < len(models):
                break  # CUDA stops at the first invalid index
            seen.append(models[index])
        else:  # a UUID or MIG name: visible, model unknown by index; assume the node's first
            if not models:
                break
            seen.append(models[0])
    return seen


def _model(models: list[str]) -> str | None:
    if not models:
        return None
    return models[0] if len(set(models)) == 1 else ", ".join(sorted(set(models)))


def visible(configured: int | None = None) -> tuple[str | None, int]:
    """``(model, count)`` of the GPUs this process can use; ``configured`` overrides the count
    (a server's ``c.PauseServer.cuda_devices``). Several models are named together."""
    torch = sys.modules.get("torch")
    if torch is not None and configured is None:
        try:
            if torch.cuda.is_initialized():
                count = torch.cuda.device_count()
                return _model([torch.cuda.get_device_name(i) for i in range(count)]), count
        except Exception:  # a broken CUDA setup: fall back to the driver's list below
            pass
    seen = _visible(installed(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    if configured is not None:
        return ((_model(seen) or _model(list(installed()))) if configured else None), configured
    return _model(seen), len(seen)
