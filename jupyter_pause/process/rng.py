"""Random number generator state: Python ``random``, NumPy's global generator, torch CPU and CUDA.

Capturing reads state only; it never draws a number, so a checkpoint does not change what the
session draws next.
"""

from __future__ import annotations

import pickle
import random
import sys
from typing import Any

from ..serialize import moved


def capture() -> dict[str, Any]:
    """The state of every generator the session uses, as plain picklable values."""
    state: dict[str, Any] = {"python": random.getstate()}
    if "numpy" in sys.modules:
        import numpy as np

        state["numpy"] = np.random.get_state()
    if "torch" in sys.modules:
        import torch

        state["torch"] = torch.get_rng_state().numpy().tobytes()
        # Reading CUDA state initialises CUDA; only do so when the session already did.
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = [s.numpy().tobytes() for s in torch.cuda.get_rng_state_all()]
    return state


def restore(state: dict[str, Any]) -> list[str]:
    """Put generator state back; returns notes on what could not be restored here."""
    notes: list[str] = []
    random.setstate(state["python"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    if "torch" in state:
        import torch

        torch.set_rng_state(torch.frombuffer(bytearray(state["torch"]), dtype=torch.uint8))
    if "cuda" in state:
        import torch

        saved = state["cuda"]
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        for index, raw in enumerate(saved[:visible]):
            torch.cuda.set_rng_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8), index)
        if visible < len(saved):
            notes.append(
                f"CUDA RNG state of {len(saved) - visible} device(s) not restored: "
                f"{visible} CUDA device(s) visible, {len(saved)} saved"
            )
    return notes


def to_bytes(state: dict[str, Any]) -> bytes:
    """Serialise captured state (plain values only, so plain pickle suffices)."""
    return pickle.dumps(state, protocol=5)


def from_bytes(data: bytes | bytearray) -> dict[str, Any]:
    """Read state written by ``to_bytes``."""
    return moved.loads(bytes(data))


def streams_moved(state: dict[str, Any]) -> list[str]:
    """The streams of ``state`` whose generator is not in that state now (CUDA: on the devices
    visible here, those ``restore`` set); what draws next from them differs from what was saved."""
    now = capture()
    names = []
    for name, saved in state.items():
        here = now.get(name)
        if name == "numpy" and here is not None:
            same = saved[0] == here[0] and bytes(saved[1]) == bytes(here[1]) and tuple(saved[2:]) == tuple(here[2:])
        elif name == "cuda":
            same = here is None or saved[: len(here)] == here[: len(saved)]
        else:
            same = saved == here
        if not same:
            names.append(name)
    return names
