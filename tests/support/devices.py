"""A stand-in for a GPU in a test on a machine without one: the resume's placements and copies."""

from __future__ import annotations

from typing import Any

import pytest
import torch


def torch_blobs_on_a_stand_in_device(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every blob holding torch tensors only is 'moved to a device' as it is read and verified:
    copied into a tensor of its own, as a device copy is, so its host bytes can go. The list
    returned gets each moved blob's size."""
    from jupyter_pause.serialize import pinned
    from jupyter_pause.session import restore

    moved: list[int] = []

    def everywhere(manifest: Any, map_location: str) -> dict[str, str]:  # the real rule's blobs
        kinds: dict[str, set[str]] = {}
        for r in manifest.arrays.values():
            kinds.setdefault(r.blob, set()).add(r.kind)
        return {blob: "cpu" for blob, k in kinds.items() if k == {"torch"}}

    def copy(data: Any, device: str) -> torch.Tensor:
        moved.append(len(data))
        return torch.frombuffer(data, dtype=torch.uint8).clone() if len(data) else torch.empty(0, dtype=torch.uint8)

    monkeypatch.setattr(restore, "_placements", everywhere)
    monkeypatch.setattr(pinned, "to_device", copy)
    return moved
