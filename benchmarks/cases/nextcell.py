"""Case 6: a resume request until the next cell runs in a new kernel, against a new kernel that
imports torch and reads the same bytes raw."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from . import shared
from .shared import Scratch


def _kernel_seconds(code: str) -> tuple[float, float]:
    """Start a new kernel and run ``code`` then a trivial next cell; (seconds to ready, total)."""
    from jupyter_client.manager import KernelManager

    t0 = time.perf_counter()
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(stderr=subprocess.DEVNULL)
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        ready = time.perf_counter() - t0
        for cell in (code, "1 + 1"):
            reply = client.execute_interactive(cell, timeout=600, output_hook=lambda msg: None)
            if reply["content"]["status"] != "ok":
                raise RuntimeError(f"{reply['content'].get('ename')}: {reply['content'].get('evalue')}")
        return ready, time.perf_counter() - t0
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def case_resume_to_next_cell(
    model: torch.nn.Module, opt: torch.optim.Optimizer, scratch: Scratch, cfg: dict[str, Any]
) -> dict[str, Any]:
    """A new kernel resuming the case-2 state until its next cell runs, vs a new kernel that
    imports torch and reads the same bytes raw (budget: that, with the read allowed 1.3x)."""
    store, session = scratch.fresh("c6-store"), shared.session_name("c6")
    shared.ours_checkpoint({"model": model, "opt": opt}, store, session)
    cold = shared.drop_page_cache()
    ours_code = (
        "import jupyter_pause\n"
        f"_c = jupyter_pause.resume_and_verify(store={str(store)!r}, session={session!r}, write_report=False)\n"
        "assert _c.verdict.kind == 'restored', _c.verdict.summary()"
    )
    base_code = (
        "import os, time, torch\n_t = time.perf_counter()\n"
        f"for _d, _, _fs in os.walk({str(store)!r}):\n"
        "    for _f in _fs:\n        open(os.path.join(_d, _f), 'rb').read()\n"
        "_read = time.perf_counter() - _t"
    )

    def base_run() -> dict[str, float]:
        if cold:
            shared.drop_page_cache()
        started = time.perf_counter()
        _kernel_seconds(base_code)
        total = time.perf_counter() - started
        if cold:
            shared.drop_page_cache()
        t0 = time.perf_counter()
        for folder, _, files in os.walk(store):
            for name in files:
                (Path(folder) / name).read_bytes()
        read = time.perf_counter() - t0
        return {"total": total, "read": read, "budget": total + 0.3 * read}

    def ours_run() -> float:
        if cold:
            shared.drop_page_cache()
        started = time.perf_counter()
        _kernel_seconds(ours_code)
        return time.perf_counter() - started

    def one_pair(i: int) -> dict[str, Any]:
        pair: dict[str, Any] = {}
        for which in shared.orders(i + 1, ("ours", "base"))[i]:
            if which == "ours":
                pair["ours"] = ours_run()
            else:
                pair["base"] = base_run()
            shared.settle()
        pair["ratio"] = pair["ours"] / pair["base"]["budget"]
        shared.log(
            f"  pair {i + 1}: resume to next cell {pair['ours']:.2f} s, budget {pair['base']['budget']:.2f} s "
            f"(kernel + torch + read {pair['base']['total']:.2f} s, of which read {pair['base']['read']:.2f} s), "
            f"ratio {pair['ratio']:.3f}"
        )
        return pair

    runs = shared.pair_loop("6", cfg, one_pair)
    scratch.remove(store)
    return {
        "name": "6 resume request -> next cell (new kernel)",
        "size": "budget = new kernel + import torch + raw read of the same bytes, read allowed 1.3x",
        "ours_s": statistics.median(p["ours"] for p in runs),
        "base_s": statistics.median(p["base"]["budget"] for p in runs),
        "ratio": shared.summarise([p["ratio"] for p in runs]),
        "figure": ("cold" if cold else "WARM") + " page cache",
        "n": len(runs),
        "pairs": runs,
    }
