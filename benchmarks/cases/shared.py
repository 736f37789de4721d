"""What every case of ``benchmarks/run.py`` shares: sizes, timing, scratch folders, pairing, the model.

Cases call these through the module (``shared.settle()``, not ``from .shared import settle``), so
a test can make the page cache, collections and syncs no-ops in one place.
"""

from __future__ import annotations

import gc
import math
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import jupyter_pause
from jupyter_pause.config import default_store_url
from jupyter_pause.serialize import writewatch
from jupyter_pause.session import lineage

GIB = 1 << 30

#: Sizes per mode. ``state_bytes`` is params + AdamW exp_avg + exp_avg_sq (3x the parameters).
CONFIGS: dict[str, dict[str, Any]] = {
    "full": {
        "dicts": 1_000_000,
        "array_bytes": 500_000_000,
        "arrays": 8,
        "state_bytes": int(1.5 * GIB),
        "layers": 100,
        # pairs per case, and the seconds after which a case takes no new pair (once it has
        # MIN_PAIRS), so a slow-disk day still ends near the planned time (case 8: per store)
        "pairs": {"1": 5, "2": 9, "3": 9, "4": 7, "5": 7, "6": 5, "7": 5, "8": 3, "9": 5},
        "budget_s": {"1": 70, "2": 70, "3": 35, "4": 45, "5": 40, "6": 60, "7": 60, "8": 240, "9": 30},
        "frozen_bytes": GIB,  # case 7: the frozen backbone (the trainable head is 1% of it)
        "frozen_layers": 8,
        "new_node_bytes": GIB,  # case 8: the session resumed on a new node
        "new_node_stores": "local,s3",
        "new_node_wait_s": 3.0,  # case 8: the shortest wait for resources (else 2x the raw read)
        "detect_bytes": 128 << 20,  # case 9: bytes fingerprinted and hashed per run
    },
    "quick": {
        "dicts": 100_000,
        "array_bytes": 50_000_000,
        "arrays": 4,
        "state_bytes": 150_000_000,
        "layers": 25,
        "pairs": {"1": 5, "2": 7, "3": 7, "4": 7, "5": 5, "6": 3, "7": 5, "8": 2, "9": 3},
        "budget_s": {"1": 12, "2": 12, "3": 8, "4": 10, "5": 8, "6": 30, "7": 15, "8": 60, "9": 10},
        "frozen_bytes": 128 << 20,
        "frozen_layers": 4,
        "new_node_bytes": 150_000_000,
        "new_node_stores": "local,s3",
        "new_node_wait_s": 2.0,
        "detect_bytes": 16 << 20,
    },
}
MIN_PAIRS = 3


# -- plumbing --------------------------------------------------------------------------------------


def log(msg: str) -> None:
    """A timestamped progress line on stdout."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def default_base_dir() -> Path:
    """A folder on the same disk as the default local store (the system temp dir when it is)."""
    anchor = Path(default_store_url())
    while not anchor.exists():
        anchor = anchor.parent
    if anchor == Path(default_store_url()):
        anchor = anchor.parent  # never inside the store itself
    tmp = Path(tempfile.gettempdir())
    return tmp if os.stat(tmp).st_dev == os.stat(anchor).st_dev else anchor


def collect() -> None:
    """A garbage collection, outside any timed region."""
    gc.collect()


def settle() -> None:
    """Free what is garbage and flush dirty pages, outside any timed region."""
    collect()
    os.sync()


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds ``fn()`` took (after a collection, untimed), and what it returned."""
    collect()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def fsync_file(f: Any) -> None:
    """Flush ``f`` and sync it to disk."""
    f.flush()
    os.fsync(f.fileno())


def dir_bytes(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def drop_page_cache() -> bool:
    """Drop the page cache (needs root and a writable /proc/sys); False where not allowed."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


class Scratch:
    """Fresh folders under one temp dir, removed as soon as a run is done with them."""

    def __init__(self, base: Path) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="jupyter-pause-bench-", dir=base))

    def fresh(self, label: str) -> Path:
        """A new empty folder whose name starts with ``label``."""
        return Path(tempfile.mkdtemp(prefix=f"{label}-", dir=self.root))

    @staticmethod
    def remove(path: Path | None) -> None:
        """Remove a folder or file (nothing when it is None or gone)."""
        if path is not None and path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()

    def close(self) -> None:
        """Remove every folder this scratch made."""
        shutil.rmtree(self.root, ignore_errors=True)


def ours_checkpoint(ns: dict[str, Any], store: Path, session: str, new_lineage: bool = True) -> tuple[float, Any]:
    """Time one ``jupyter_pause.checkpoint`` of ``ns`` into ``store``: unless told otherwise, a first
    checkpoint, as a new kernel takes it (a new lineage, no write tracking from earlier ones)."""
    if new_lineage:
        as_new_kernel()
    return timed(lambda: jupyter_pause.checkpoint(store=str(store), session=session, namespace=ns))


def as_new_kernel() -> None:
    """Go on as a new kernel would: no lineage position, no write tracking from earlier checkpoints."""
    lineage.forget()
    writewatch.forget()


def session_name(label: str) -> str:
    """A session name no earlier run used."""
    return f"{label}-{uuid.uuid4().hex[:8]}"


# -- pairing ---------------------------------------------------------------------------------------


def orders(n: int, names: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Run orders for n rounds: forward, reversed, then rotations of both (A B, B A, ...)."""
    out: list[tuple[str, ...]] = []
    k = len(names)
    for i in range(n):
        rotated = names[(i // 2) % k :] + names[: (i // 2) % k]
        out.append(rotated if i % 2 == 0 else tuple(reversed(rotated)))
    return out


def pair_loop(case: str, plan: dict[str, Any], body: Callable[[int], dict[str, Any]]) -> list[dict[str, Any]]:
    """Run ``body(i)`` for each planned pair; stop early (after MIN_PAIRS) once over budget."""
    pairs, budget = plan["pairs"][case], plan["budget_s"][case]
    runs: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for i in range(pairs):
        spent = time.perf_counter() - t0
        if len(runs) >= MIN_PAIRS and spent + spent / len(runs) > budget:
            log(f"  case {case}: stopping after {len(runs)} of {pairs} pairs (time budget {budget} s)")
            break
        runs.append(body(i))
    return runs


def summarise(ratios: list[float]) -> dict[str, float]:
    """The median of per-pair ratios, with their range."""
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
    }


# -- the model of cases 2-6 and 8 -------------------------------------------------------------------


def build_model(cfg: dict[str, Any]) -> tuple[torch.nn.Module, torch.optim.Optimizer, int]:
    """``layers`` bias-free Linear layers + AdamW after one step, about ``state_bytes`` in all."""
    layers = cfg["layers"]
    d = int(math.sqrt(cfg["state_bytes"] / 3 / layers / 4))
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(d, d, bias=False) for _ in range(layers)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # Random gradients rather than a backward pass: a deep stack's gradients underflow to zero,
    # and all-zero moment tensors would dedupe by content, flattering the checkpoint.
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return model, opt, d


def tensor_views(model: torch.nn.Module, opt: torch.optim.Optimizer) -> list[np.ndarray]:
    """Byte views of every tensor in the model and optimizer state (what a raw write writes)."""
    tensors = list(model.parameters())
    for state in opt.state.values():
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return [t.detach().reshape(-1).view(torch.uint8).numpy() for t in tensors]


def torch_save(model: torch.nn.Module, opt: torch.optim.Optimizer, path: Path) -> None:
    """``torch.save`` of the model's and the optimizer's state dicts, then fsync."""
    with open(path, "wb") as f:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, f)
        fsync_file(f)


def raw_write(views: list[np.ndarray], path: Path) -> None:
    """The tensors' bytes into one file, then fsync."""
    with open(path, "wb") as f:
        for view in views:
            f.write(view)
        fsync_file(f)
