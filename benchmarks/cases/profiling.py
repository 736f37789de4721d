"""``benchmarks/run.py --profile``: cProfile one checkpoint of case 1, a first and a second of case 2, one resume."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import jupyter_pause
from jupyter_pause.session import lineage

from . import shared
from .namespace import build_namespace
from .shared import Scratch


def profile(cfg: dict[str, Any], scratch: Scratch, top: int, out_dir: Path) -> None:
    """cProfile one checkpoint of case 1, a first and a second checkpoint of case 2, one resume.

    Only the main thread is profiled: blob writes and reads run in the store's thread pool, so
    their time shows as ``acquire`` (waiting on the pool's futures). Each profile is written to
    ``out_dir/profile-<label>.prof``.
    """
    import cProfile
    import pstats

    out_dir.mkdir(parents=True, exist_ok=True)

    def profiled(label: str, fn: Callable[..., Any], **kwargs: Any) -> None:
        shared.collect()
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        fn(**kwargs)
        prof.disable()
        wall = time.perf_counter() - t0
        prof.dump_stats(out_dir / f"profile-{label}.prof")
        print(f"\n=== {label}: {wall:.2f} s wall ===")
        pstats.Stats(prof).strip_dirs().sort_stats("tottime").print_stats(top)
        shared.settle()

    ns = build_namespace(cfg)
    store = scratch.fresh("prof-case1")
    lineage.forget()
    profiled("case1-checkpoint", jupyter_pause.checkpoint, store=str(store), session="p1", namespace=ns)
    scratch.remove(store)
    del ns
    shared.settle()

    model, opt, _ = shared.build_model(cfg)
    ns = {"model": model, "opt": opt}
    store = scratch.fresh("prof-case2")
    lineage.forget()
    profiled("case2-first-checkpoint", jupyter_pause.checkpoint, store=str(store), session="p2", namespace=ns)
    with torch.no_grad():
        next(iter(model.parameters())).add_(1e-4)
    profiled("case3-second-checkpoint", jupyter_pause.checkpoint, store=str(store), session="p2", namespace=ns)
    del ns, model, opt
    shared.settle()
    cold = shared.drop_page_cache()
    target: dict[str, Any] = {}
    lineage.forget()
    label = f"case4-resume-{'cold' if cold else 'warm'}"
    profiled(label, jupyter_pause.resume, store=str(store), session="p2", namespace=target)
    scratch.remove(store)
