"""Case 5: how long ``checkpoint_async`` blocks the caller, against a synchronous checkpoint."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

import jupyter_pause
from jupyter_pause.session import staging

from . import shared
from .shared import Scratch


def case_async(
    model: torch.nn.Module, opt: torch.optim.Optimizer, scratch: Scratch, cfg: dict[str, Any]
) -> dict[str, Any]:
    """How long checkpoint_async blocks the caller vs a synchronous checkpoint of the same state."""
    ns = {"model": model, "opt": opt}

    def sync_run() -> float:
        return shared.ours_checkpoint(ns, scratch.fresh("c5-sync"), shared.session_name("c5"))[0]

    def async_run() -> tuple[float, float]:
        shared.as_new_kernel()
        store = scratch.fresh("c5-async")
        t0 = time.perf_counter()
        job = jupyter_pause.checkpoint_async(store=str(store), session=shared.session_name("c5"), namespace=ns)
        blocked = time.perf_counter() - t0
        job.wait()
        return blocked, time.perf_counter() - t0

    # The first background checkpoint of a kernel allocates the staging buffer the later ones
    # reuse (fresh memory is slow to touch): reported apart, the pairs measure the steady state.
    staging.release()
    shared.settle()
    first_blocked, _ = async_run()
    shared.log(f"  first --async of the process (allocates its staging buffer): blocked {first_blocked:.2f} s")
    shared.settle()

    def one_pair(i: int) -> dict[str, Any]:
        pair: dict[str, Any] = {}
        for which in shared.orders(i + 1, ("sync", "async"))[i]:
            if which == "sync":
                pair["sync"] = sync_run()
            else:
                pair["blocked"], pair["async_total"] = async_run()
            shared.settle()
        pair["ratio"] = pair["blocked"] / pair["sync"]
        shared.log(
            f"  pair {i + 1}: sync {pair['sync']:.2f} s, async blocked {pair['blocked']:.2f} s "
            f"(done after {pair['async_total']:.2f} s), ratio {pair['ratio']:.3f}"
        )
        return pair

    runs = shared.pair_loop("5", cfg, one_pair)
    ratios = [p["ratio"] for p in runs]
    return {
        "name": "5 --async: kernel blocked vs sync checkpoint",
        "size": "the case 2 model + AdamW state; blocked = until checkpoint_async returns",
        "ours_s": statistics.median(p["blocked"] for p in runs),
        "base_s": statistics.median(p["sync"] for p in runs),
        "ratio": shared.summarise(ratios),
        "figure": f"background write done after {statistics.median(p['async_total'] for p in runs):.2f} s; "
        f"the process's first --async blocked {first_blocked:.2f} s (allocating its staging buffer)",
        "first_blocked_s": first_blocked,
        "n": len(runs),
        "pairs": runs,
    }
