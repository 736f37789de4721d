"""Case 7: a frozen backbone's periodic checkpoint after one training step, against the first."""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch

from . import shared
from .incremental import first_then_next
from .shared import Scratch


def build_frozen(cfg: dict[str, Any]) -> dict[str, Any]:
    """A frozen backbone of ``frozen_bytes`` (bias-free Linear layers) and a trainable head of 1%
    of its size, AdamW on the head only (a LoRA / adapter fine-tune), after one training step."""
    layers = cfg["frozen_layers"]
    d = int(math.sqrt(cfg["frozen_bytes"] / layers / 4))
    torch.manual_seed(0)
    backbone = torch.nn.Sequential(*[torch.nn.Linear(d, d, bias=False) for _ in range(layers)])
    backbone.requires_grad_(False)
    head = torch.nn.Linear(d, max(1, round(cfg["frozen_bytes"] / 100 / 4 / d)), bias=False)
    ns = {"backbone": backbone, "head": head, "opt": torch.optim.AdamW(head.parameters(), lr=1e-3)}
    frozen_step(ns)
    return ns


def frozen_step(ns: dict[str, Any]) -> None:
    """One training step of the head on the frozen backbone's features."""
    with torch.no_grad():
        features = ns["backbone"](torch.randn(8, ns["head"].in_features))
    ns["head"](features).pow(2).mean().backward()
    ns["opt"].step()
    ns["opt"].zero_grad(set_to_none=True)


def case_frozen_backbone(scratch: Scratch, cfg: dict[str, Any]) -> dict[str, Any]:
    """A periodic checkpoint after one training step of a frozen-backbone fine-tune, vs the first
    checkpoint of the same state. Pairs alternate as in case 3 (first then next, or the next
    into the previous pair's store, then a first into a fresh one)."""
    ns = build_frozen(cfg)
    frozen = sum(p.nbytes for p in ns["backbone"].parameters())
    trainable = sum(p.nbytes for p in ns["head"].parameters())
    runs = first_then_next(
        "7",
        cfg,
        scratch,
        ns,
        lambda i: frozen_step(ns),
        lambda s: (
            f"copied {s['bytes_copied'] / 1e6:.0f} MB, kept {s['bytes_kept_on_device'] / 1e6:.0f} MB on the "
            f"device, wrote {s['bytes_written'] / 1e6:.1f} MB"
        ),
        trigger="periodic",
    )
    second = runs[-1]["second"]
    kept, written = second["bytes_kept_on_device"], statistics.median(p["second"]["bytes_written"] for p in runs)
    how = f"kept {kept / 1e6:.0f} MB unchanged on the device" if kept else "CPU tensors: unchanged ones hashed (xxh3)"
    return {
        "name": "7 frozen backbone: periodic ckpt after a step vs 1st",
        "size": f"{frozen / shared.GIB:.2f} GiB frozen + {trainable / 1e6:.1f} MB trainable (AdamW on it); {how}",
        "ours_s": statistics.median(p["second"]["seconds"] for p in runs),
        "base_s": statistics.median(p["first"]["seconds"] for p in runs),
        "ratio": shared.summarise([p["ratio"] for p in runs]),
        "figure": f"wrote {written / 1e6:.1f} of {second['bytes_total'] / 1e6:.0f} MB",
        "n": len(runs),
        "pairs": runs,
    }
