"""What a checkpoint needs of a node (CUDA devices), and whether this node has it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import PauseError
from ..store.manifest import Manifest


def cuda_needed(manifest: Manifest) -> int:
    """How many CUDA devices the checkpoint's tensors were spread over (highest index + 1)."""
    indices = [int(d.partition(":")[2] or 0) for d in manifest.devices() if d.startswith("cuda")]
    return max(indices) + 1 if indices else 0


def cuda_visible(configured: int | None) -> int:
    """CUDA devices this node offers: the configured number, else what torch sees."""
    if configured is not None:
        return configured
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def missing(manifest: Manifest, configured: int | None, map_location: str) -> str | None:
    """What this node lacks for ``manifest`` ("needs 1 CUDA device, none visible"), or None."""
    if map_location == "cpu":
        return None
    needed = cuda_needed(manifest)
    if not needed:
        return None
    visible = cuda_visible(configured)
    if visible >= needed:
        return None
    have = "none visible" if visible == 0 else f"{visible} visible"
    wanted = ", ".join(sorted(manifest.devices() - {"cpu"}))
    return f"needs {needed} CUDA device{'s' if needed > 1 else ''} ({wanted}), {have}"


async def wait(manifest: Manifest, settings: Any, location: str, waiting: Callable[[str], Awaitable[None]]) -> None:
    """Return once this node has what ``manifest`` needs; until then ``waiting(what lacks)`` every
    ``settings.resource_poll_interval`` seconds. Gives up (``PauseError``) after
    ``settings.resource_wait_timeout`` seconds."""
    deadline = time.monotonic() + settings.resource_wait_timeout
    while (lack := await asyncio.to_thread(missing, manifest, settings.cuda_devices, location)) is not None:
        if time.monotonic() > deadline:
            raise PauseError(
                f"gave up after {settings.resource_wait_timeout:g} s: {lack}; resume on a node "
                'that has it, or with map_location "cpu"'
            )
        await waiting(lack)
        await asyncio.sleep(settings.resource_poll_interval)
