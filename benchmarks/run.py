#!/usr/bin/env python
"""Paired benchmarks of jupyter_pause against the obvious alternatives.

    .venv/bin/python benchmarks/run.py [--quick] [--dir DIR] [--pairs N] [--check] [--profile]

Every comparison is measured as paired runs, side by side in this one process, alternating the
order (A B, B A, ...), and reported as the MEDIAN OF PER-PAIR RATIOS. Absolute times are printed
for orientation only: the disk here is noisy, so no figure is judged on an absolute time.

Cases (see benchmarks/README.md):
  1   namespace of small dicts + numpy arrays: checkpoint vs dill.dump_module + fsync
  2a  model + AdamW state: checkpoint vs torch.save + fsync
  2b  same: checkpoint throughput as a fraction of a raw write of the tensor bytes + fsync
  3   second checkpoint after changing one of the parameter tensors, vs a first checkpoint
  4   resume into a fresh dict vs torch.load of the torch.save file (page cache dropped if allowed)
  5   --async: time the kernel is blocked vs a synchronous checkpoint
  6   resume request -> next cell in a new kernel
  7   frozen backbone (1 GiB frozen + 1% trainable, AdamW): periodic checkpoint after a step vs the first
  9   change detection per GiB on CPU: the device fingerprint vs xxh3 of the same bytes

Results go to stdout (a table) and to benchmarks/results/latest.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
import uuid
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run from a checkout even where the package is not installed
    sys.path.insert(0, str(ROOT))

import dill  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import jupyter_pause  # noqa: E402
from jupyter_pause.config import default_store_url  # noqa: E402
from jupyter_pause.session import lineage, staging  # noqa: E402

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
        # MIN_PAIRS), so a slow-disk day still ends near the planned time
        "pairs": {"1": 5, "2": 9, "3": 9, "4": 7, "5": 7, "6": 5, "7": 5, "9": 5},
        "budget_s": {"1": 70, "2": 70, "3": 35, "4": 45, "5": 40, "6": 60, "7": 60, "9": 30},
        "frozen_bytes": GIB,  # case 7: the frozen backbone (the trainable head is 1% of it)
        "frozen_layers": 8,
        "detect_bytes": 128 << 20,  # case 9: bytes fingerprinted and hashed per run
    },
    "quick": {
        "dicts": 100_000,
        "array_bytes": 50_000_000,
        "arrays": 4,
        "state_bytes": 150_000_000,
        "layers": 25,
        "pairs": {"1": 5, "2": 7, "3": 7, "4": 7, "5": 5, "6": 3, "7": 5, "9": 3},
        "budget_s": {"1": 12, "2": 12, "3": 8, "4": 10, "5": 8, "6": 30, "7": 15, "9": 10},
        "frozen_bytes": 128 << 20,
        "frozen_layers": 4,
        "detect_bytes": 16 << 20,
    },
}
MIN_PAIRS = 3

#: Targets, as the largest acceptable median of (ours time / baseline time); None: report only.
TARGETS = {
    "1": 1 / 8,  # ours at least 8x faster than dill.dump_module + fsync
    "2a": 0.6,  # ours at most 0.6x torch.save + fsync (never below raw: see the floor in its note)
    "2b": 1 / 0.85,  # throughput at least 0.85x raw write + fsync of the same bytes
    "3": 0.1,  # second checkpoint after a ~1% change: at most 0.1x a first one
    "3b": 0.1,  # the same in a resumed session (change detection from page flags)
    "4": 0.6,  # resume into live objects, at most 0.6x torch.load, both from a cold page cache
    "5": 0.25,  # --async: time the kernel is blocked, at most 0.25x a synchronous checkpoint
    "6": 1.0,  # resume request -> next cell, at most kernel start + torch import + 1.3x raw read
    "7": 0.05,  # frozen backbone: periodic checkpoint after a training step, at most 0.05x the first
    "9": None,  # change detection per GiB on CPU: device fingerprint vs xxh3, reported only
}


# -- plumbing --------------------------------------------------------------------------------------


def log(msg: str) -> None:
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


def settle() -> None:
    """Free what is garbage and flush dirty pages, outside any timed region."""
    gc.collect()
    os.sync()


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def fsync_file(f: Any) -> None:
    f.flush()
    os.fsync(f.fileno())


def dir_bytes(path: Path) -> int:
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
        return Path(tempfile.mkdtemp(prefix=f"{label}-", dir=self.root))

    @staticmethod
    def remove(path: Path | None) -> None:
        if path is not None and path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def ours_checkpoint(ns: dict[str, Any], store: Path, session: str, new_lineage: bool = True) -> tuple[float, Any]:
    """Time one ``jupyter_pause.checkpoint`` of ``ns`` into ``store`` (new lineage unless told)."""
    if new_lineage:
        lineage.forget()
    return timed(lambda: jupyter_pause.checkpoint(store=str(store), session=session, namespace=ns))


def session_name(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


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
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
    }


# -- case 1: namespace of small dicts + numpy arrays -------------------------------------------


def build_namespace(cfg: dict[str, Any]) -> dict[str, Any]:
    rng = np.random.default_rng(1)
    ns: dict[str, Any] = {"records": [{"i": i, "s": str(i), "f": i * 0.5} for i in range(cfg["dicts"])]}
    per = cfg["array_bytes"] // cfg["arrays"] // 8
    for k in range(cfg["arrays"]):
        ns[f"arr{k}"] = rng.random(per)  # distinct contents: nothing dedupes by content key
    return ns


def case_namespace(cfg: dict[str, Any], scratch: Scratch) -> dict[str, Any]:
    log(f"case 1: building {cfg['dicts']:,} dicts + {cfg['array_bytes'] / 1e6:.0f} MB of numpy arrays")
    ns = build_namespace(cfg)
    mod = types.ModuleType("bench_ns")
    mod.__dict__.update(ns)

    def run_ours() -> dict[str, Any]:
        store = scratch.fresh("c1-ours")
        seconds, res = ours_checkpoint(ns, store, session_name("c1"))
        stats = dict(res.manifest.stats)
        scratch.remove(store)
        return {"seconds": seconds, "reported_seconds": res.seconds, **stats}

    def run_dill() -> dict[str, Any]:
        folder = scratch.fresh("c1-dill")
        path = folder / "session.pkl"

        def dump() -> None:
            with open(path, "wb") as f:
                dill.dump_module(f, module=mod)
                fsync_file(f)

        seconds, _ = timed(dump)
        size = path.stat().st_size
        scratch.remove(folder)
        return {"seconds": seconds, "bytes": size}

    run_ours()  # warm-up, untimed: first large allocations and writes of this case
    settle()
    sequence = orders(cfg["pairs"]["1"], ("ours", "dill"))

    def one_pair(i: int) -> dict[str, Any]:
        order = sequence[i]
        pair: dict[str, Any] = {"order": list(order)}
        for which in order:
            pair[which] = run_ours() if which == "ours" else run_dill()
            settle()
        pair["ratio"] = pair["ours"]["seconds"] / pair["dill"]["seconds"]
        log(
            f"  pair {i + 1} ({'-'.join(order)}): ours {pair['ours']['seconds']:.2f} s, "
            f"dill {pair['dill']['seconds']:.2f} s, ratio {pair['ratio']:.3f}"
        )
        return pair

    runs = pair_loop("1", cfg, one_pair)  # the namespace is freed when this function returns
    ratios = [p["ratio"] for p in runs]
    return {
        "name": "1 namespace ckpt vs dill.dump_module+fsync",
        "size": f"{cfg['dicts']:,} dicts + {cfg['array_bytes'] / 1e6:.0f} MB numpy",
        "ours_s": statistics.median(p["ours"]["seconds"] for p in runs),
        "base_s": statistics.median(p["dill"]["seconds"] for p in runs),
        "ratio": summarise(ratios),
        "figure": f"{1 / statistics.median(ratios):.1f}x faster",
        "n": len(runs),
        "pairs": runs,
    }


# -- cases 2-4: model + optimizer state ---------------------------------------------------------


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
    with open(path, "wb") as f:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, f)
        fsync_file(f)


def raw_write(views: list[np.ndarray], path: Path) -> None:
    with open(path, "wb") as f:
        for view in views:
            f.write(view)
        fsync_file(f)


def case_tensor_write(
    model: torch.nn.Module, opt: torch.optim.Optimizer, scratch: Scratch, cfg: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    ns = {"model": model, "opt": opt}
    views = tensor_views(model, opt)
    raw_bytes = sum(v.nbytes for v in views)

    def run(which: str) -> dict[str, Any]:
        folder = scratch.fresh(f"c2-{which}")
        if which == "ours":
            seconds, res = ours_checkpoint(ns, folder, session_name("c2"))
            out = {"seconds": seconds, "reported_seconds": res.seconds, **res.manifest.stats}
            out["bytes"] = out["bytes_written"]
        elif which == "torch":
            path = folder / "state.pt"
            seconds, _ = timed(lambda: torch_save(model, opt, path))
            out = {"seconds": seconds, "bytes": path.stat().st_size}
        else:
            path = folder / "state.raw"
            seconds, _ = timed(lambda: raw_write(views, path))
            out = {"seconds": seconds, "bytes": raw_bytes}
        scratch.remove(folder)
        return out

    run("ours")  # warm-up, untimed
    settle()
    sequence = orders(cfg["pairs"]["2"], ("ours", "torch", "raw"))

    def one_round(i: int) -> dict[str, Any]:
        order = sequence[i]
        trio: dict[str, Any] = {"order": list(order)}
        for which in order:
            trio[which] = run(which)
            settle()
        o, t, r = trio["ours"], trio["torch"], trio["raw"]
        trio["ratio_torch"] = o["seconds"] / t["seconds"]
        # Throughput fraction: (ours bytes / ours time) / (raw bytes / raw time).
        trio["throughput_fraction_raw"] = (o["bytes"] / o["seconds"]) / (r["bytes"] / r["seconds"])
        log(
            f"  round {i + 1} ({'-'.join(order)}): ours {o['seconds']:.2f} s, torch.save "
            f"{t['seconds']:.2f} s, raw {r['seconds']:.2f} s; ours/torch {trio['ratio_torch']:.3f}, "
            f"ours throughput {trio['throughput_fraction_raw']:.2f} of raw"
        )
        if o["bytes_written"] != o["bytes_total"]:
            log(f"  WARNING: a fresh checkpoint reused {o['bytes_reused']} bytes (content dedupe)")
        return trio

    runs = pair_loop("2", cfg, one_round)
    ratios = [p["ratio_torch"] for p in runs]
    fractions = [p["throughput_fraction_raw"] for p in runs]
    ours_s = statistics.median(p["ours"]["seconds"] for p in runs)
    raw_s = statistics.median(p["raw"]["seconds"] for p in runs)
    total = runs[0]["ours"]["bytes_total"]
    common = {"ours_s": ours_s, "pairs": runs, "n": len(runs), "size": f"{total / GIB:.2f} GiB model+AdamW state"}
    a = {
        **common,
        "name": "2a tensor ckpt vs torch.save+fsync",
        "base_s": statistics.median(p["torch"]["seconds"] for p in runs),
        "ratio": summarise(ratios),
        # No checkpoint beats writing its bytes raw: when the disk is slow, raw itself can be
        # above 0.6x torch.save, and then so is the target's floor.
        "floor": summarise([p["raw"]["seconds"] / p["torch"]["seconds"] for p in runs]),
        "figure": f"{statistics.median(ratios):.2f}x the time; raw write+fsync itself "
        f"{statistics.median(p['raw']['seconds'] / p['torch']['seconds'] for p in runs):.2f}x (the floor)",
    }
    b = {
        **{k: v for k, v in common.items() if k != "pairs"},
        "name": "2b tensor ckpt vs raw write+fsync",
        "base_s": raw_s,
        "ratio": summarise([p["ours"]["seconds"] / p["raw"]["seconds"] for p in runs]),
        "throughput_fraction": summarise(fractions),
        "figure": f"{statistics.median(fractions):.0%} of raw throughput "
        f"(ours {total / ours_s / 1e9:.2f} GB/s, raw {raw_bytes / raw_s / 1e9:.2f} GB/s)",
    }
    return a, b


def second_vs_first(i: int, pair: dict[str, Any], detail: str) -> dict[str, Any]:
    """Close a case-3 pair: its ratio, and a log line with ``detail`` on the second checkpoint."""
    f, s = pair["first"], pair["second"]
    pair["ratio"] = s["seconds"] / f["seconds"]
    log(
        f"  pair {i + 1} ({'-'.join(pair['order'])}): first {f['seconds']:.2f} s, second "
        f"{s['seconds']:.2f} s ({detail}), ratio {pair['ratio']:.3f}"
    )
    return pair


Where = tuple[Path, str]  # a store, and a session in it


def first_then_next(
    case: str,
    cfg: dict[str, Any],
    scratch: Scratch,
    ns: dict[str, Any],
    change: Callable[[int], dict[str, Any] | None],
    detail: Callable[[dict[str, Any]], str],
    trigger: str = "manual",
) -> list[dict[str, Any]]:
    """Pairs of a first checkpoint of ``ns`` into a fresh store and the next one (after
    ``change(i)``) into a store holding one: alternately first then next, or the next into the
    previous pair's store then a first into a fresh one. Each pair gets its ratio (next / first)
    and a log line with ``detail`` of the next one; every store is removed afterwards."""
    prev: Where | None = None

    def first() -> tuple[dict[str, Any], Where]:
        store, session = scratch.fresh(f"c{case}"), session_name(f"c{case}")
        seconds, res = ours_checkpoint(ns, store, session)
        return {"seconds": seconds, **res.manifest.stats}, (store, session)

    def following(where: Where, i: int) -> dict[str, Any]:
        noted = change(i) or {}
        seconds, res = timed(
            lambda: jupyter_pause.checkpoint(store=str(where[0]), session=where[1], namespace=ns, trigger=trigger)
        )
        return {"seconds": seconds, **noted, **res.manifest.stats}

    def one_pair(i: int) -> dict[str, Any]:
        nonlocal prev
        pair: dict[str, Any] = {}
        if i % 2 == 0 or prev is None:
            pair["order"] = ["first", "second"]
            pair["first"], where = first()
            settle()
            pair["second"] = following(where, i)
            if prev is not None:
                scratch.remove(prev[0])
        else:
            pair["order"] = ["second", "first"]
            pair["second"] = following(prev, i)
            settle()
            scratch.remove(prev[0])
            pair["first"], where = first()
        settle()
        prev = where
        return second_vs_first(i, pair, detail(pair["second"]))

    try:
        return pair_loop(case, cfg, one_pair)
    finally:
        if prev is not None:
            scratch.remove(prev[0])


def case_incremental(
    model: torch.nn.Module, opt: torch.optim.Optimizer, scratch: Scratch, cfg: dict[str, Any]
) -> dict[str, Any]:
    """First checkpoint into a fresh store vs the next one into the same store after a 1% change.

    Pairs alternate: even pairs take a first checkpoint, change one tensor, take the next one;
    odd pairs change one tensor and checkpoint into the previous pair's store first, then take a
    first checkpoint into a fresh store.
    """
    ns = {"model": model, "opt": opt}
    params = list(model.parameters())
    changed_bytes = params[0].nbytes

    def change(i: int) -> dict[str, Any]:
        k = (7 * i + 3) % len(params)
        with torch.no_grad():
            params[k].mul_(1.001).add_(1e-4)  # every element of one tensor changes
        return {"tensor": k}

    runs = first_then_next(
        "3",
        cfg,
        scratch,
        ns,
        change,
        lambda s: f"wrote {s['bytes_written'] / 1e6:.1f} of {s['bytes_total'] / 1e6:.0f} MB",
    )
    ratios = [p["ratio"] for p in runs]
    total = runs[0]["first"]["bytes_total"]
    written = statistics.median(p["second"]["bytes_written"] for p in runs)
    result = {
        "name": "3 2nd ckpt after ~1% change vs 1st",
        "size": f"1 of {len(params)} params changed ({changed_bytes / total:.2%} of state)",
        "ours_s": statistics.median(p["second"]["seconds"] for p in runs),
        "base_s": statistics.median(p["first"]["seconds"] for p in runs),
        "ratio": summarise(ratios),
        "figure": f"wrote {written / 1e6:.1f} of {total / 1e6:.0f} MB",
        "changed_fraction_of_state": changed_bytes / total,
        "n": len(runs),
        "pairs": runs,
    }
    return result


def case_incremental_resumed(
    model: torch.nn.Module, opt: torch.optim.Optimizer, scratch: Scratch, cfg: dict[str, Any]
) -> dict[str, Any]:
    """Case 3 in a session resumed from its store: the tensors are mapped from their blobs, so
    change detection reads page flags rather than bytes. Each pair changes another parameter
    of the resumed model and checkpoints it, against a first checkpoint into a fresh store."""
    ns = {"model": model, "opt": opt}
    home, session = scratch.fresh("c3b"), session_name("c3b")
    ours_checkpoint(ns, home, session)
    lineage.forget()
    resumed: dict[str, Any] = {}
    jupyter_pause.resume(store=str(home), session=session, namespace=resumed)
    params = list(resumed["model"].parameters())
    settle()

    def one_pair(i: int) -> dict[str, Any]:
        pair: dict[str, Any] = {"order": list(orders(i + 1, ("second", "first"))[i])}
        for which in pair["order"]:
            if which == "second":
                with torch.no_grad():
                    params[(7 * i + 3) % len(params)].mul_(1.001).add_(1e-4)
                seconds, res = ours_checkpoint(resumed, home, session, new_lineage=False)
                pair["second"] = {"seconds": seconds, **res.manifest.stats}
            else:
                store = scratch.fresh("c3b-first")
                seconds, res = ours_checkpoint(ns, store, session_name("c3b-first"))
                pair["first"] = {"seconds": seconds, **res.manifest.stats}
                scratch.remove(store)
            settle()
        s = pair["second"]
        hashed = (s["bytes_total"] - s["bytes_unread"]) / 1e6
        return second_vs_first(
            i, pair, f"hashed {hashed:.0f} of {s['bytes_total'] / 1e6:.0f} MB, wrote {s['bytes_written'] / 1e6:.1f} MB"
        )

    runs = pair_loop("3", cfg, one_pair)
    scratch.remove(home)
    unread = statistics.median(p["second"]["bytes_unread"] for p in runs)
    total = runs[0]["second"]["bytes_total"]
    return {
        "name": "3b the same, in a resumed session",
        "size": "one more parameter changed per pair; unchanged mapped tensors known from page flags",
        "ours_s": statistics.median(p["second"]["seconds"] for p in runs),
        "base_s": statistics.median(p["first"]["seconds"] for p in runs),
        "ratio": summarise([p["ratio"] for p in runs]),
        "figure": f"{unread / total:.0%} of the bytes known unchanged without reading them",
        "n": len(runs),
        "pairs": runs,
    }


def case_async(
    model: torch.nn.Module, opt: torch.optim.Optimizer, scratch: Scratch, cfg: dict[str, Any]
) -> dict[str, Any]:
    """How long checkpoint_async blocks the caller vs a synchronous checkpoint of the same state."""
    ns = {"model": model, "opt": opt}

    def sync_run() -> float:
        return ours_checkpoint(ns, scratch.fresh("c5-sync"), session_name("c5"))[0]

    def async_run() -> tuple[float, float]:
        lineage.forget()
        store = scratch.fresh("c5-async")
        t0 = time.perf_counter()
        job = jupyter_pause.checkpoint_async(store=str(store), session=session_name("c5"), namespace=ns)
        blocked = time.perf_counter() - t0
        job.wait()
        return blocked, time.perf_counter() - t0

    # The first background checkpoint of a kernel allocates the staging buffer the later ones
    # reuse (fresh memory is slow to touch): reported apart, the pairs measure the steady state.
    staging.release()
    settle()
    first_blocked, _ = async_run()
    log(f"  first --async of the process (allocates its staging buffer): blocked {first_blocked:.2f} s")
    settle()

    def one_pair(i: int) -> dict[str, Any]:
        pair: dict[str, Any] = {}
        for which in orders(i + 1, ("sync", "async"))[i]:
            if which == "sync":
                pair["sync"] = sync_run()
            else:
                pair["blocked"], pair["async_total"] = async_run()
            settle()
        pair["ratio"] = pair["blocked"] / pair["sync"]
        log(
            f"  pair {i + 1}: sync {pair['sync']:.2f} s, async blocked {pair['blocked']:.2f} s "
            f"(done after {pair['async_total']:.2f} s), ratio {pair['ratio']:.3f}"
        )
        return pair

    runs = pair_loop("5", cfg, one_pair)
    ratios = [p["ratio"] for p in runs]
    return {
        "name": "5 --async: kernel blocked vs sync checkpoint",
        "size": "the case 2 model + AdamW state; blocked = until checkpoint_async returns",
        "ours_s": statistics.median(p["blocked"] for p in runs),
        "base_s": statistics.median(p["sync"] for p in runs),
        "ratio": summarise(ratios),
        "figure": f"background write done after {statistics.median(p['async_total'] for p in runs):.2f} s; "
        f"the process's first --async blocked {first_blocked:.2f} s (allocating its staging buffer)",
        "first_blocked_s": first_blocked,
        "n": len(runs),
        "pairs": runs,
    }


def case_restore(
    model: torch.nn.Module, opt: torch.optim.Optimizer, scratch: Scratch, cfg: dict[str, Any]
) -> dict[str, Any]:
    """resume() into a fresh dict vs torch.load of the torch.save file into a live model and
    optimizer (built beforehand, untimed), page cache dropped first. A raw read of the .pt is
    measured too: the floor no restore from this disk can go below."""
    store, session = scratch.fresh("c4-store"), session_name("c4")
    ours_checkpoint({"model": model, "opt": opt}, store, session)
    pt = scratch.fresh("c4-torch") / "state.pt"
    torch_save(model, opt, pt)
    probe = next(iter(model.parameters())).detach().clone()
    live_model, live_opt, _ = build_model(cfg)
    settle()
    cold = drop_page_cache()

    def torch_restore() -> None:
        state = torch.load(pt, map_location="cpu")
        live_model.load_state_dict(state["model"])
        live_opt.load_state_dict(state["opt"])

    def run(which: str, verify: bool) -> float:
        if cold:
            drop_page_cache()
        if which == "ours":
            target: dict[str, Any] = {}
            lineage.forget()
            seconds, res = timed(lambda: jupyter_pause.resume(store=str(store), session=session, namespace=target))
            if verify:
                back = next(iter(target["model"].parameters()))
                assert torch.equal(back, probe), "resumed parameters differ from the saved ones"
                assert len(target["opt"].state) == len(list(target["model"].parameters()))
            del target, res
        elif which == "torch":
            seconds, _ = timed(torch_restore)
            if verify:
                assert torch.equal(next(iter(live_model.parameters())), probe)
        else:
            seconds, _ = timed(pt.read_bytes)
        gc.collect()
        return seconds

    sequence = orders(cfg["pairs"]["4"], ("ours", "torch", "raw"))

    def one_pair(i: int) -> dict[str, Any]:
        order = sequence[i]
        pair: dict[str, Any] = {"order": list(order)}
        for which in order:
            pair[which] = {"seconds": run(which, verify=i == 0)}
        pair["ratio"] = pair["ours"]["seconds"] / pair["torch"]["seconds"]
        pair["floor"] = pair["raw"]["seconds"] / pair["torch"]["seconds"]
        log(
            f"  round {i + 1} ({'-'.join(order)}): resume {pair['ours']['seconds']:.2f} s, torch.load + "
            f"load_state_dict {pair['torch']['seconds']:.2f} s, raw read {pair['raw']['seconds']:.2f} s; "
            f"ratio {pair['ratio']:.3f} (floor {pair['floor']:.3f})"
        )
        return pair

    runs = pair_loop("4", cfg, one_pair)
    ours_bytes, torch_bytes = dir_bytes(store), pt.stat().st_size
    scratch.remove(store)
    scratch.remove(pt.parent)
    ratios = [p["ratio"] for p in runs]
    return {
        "name": f"4 resume vs torch.load+load_state_dict ({'cold' if cold else 'WARM'} cache)",
        "size": f"store {ours_bytes / GIB:.2f} GiB, .pt {torch_bytes / GIB:.2f} GiB",
        "ours_s": statistics.median(p["ours"]["seconds"] for p in runs),
        "base_s": statistics.median(p["torch"]["seconds"] for p in runs),
        "ratio": summarise(ratios),
        "figure": (
            "page cache dropped before each run" if cold else "page cache could NOT be dropped: warm-cache figures"
        )
        + f"; raw read of the .pt itself {statistics.median(p['floor'] for p in runs):.2f}x (the floor)",
        "cold_cache": cold,
        "n": len(runs),
        "pairs": runs,
    }


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
    store, session = scratch.fresh("c6-store"), session_name("c6")
    ours_checkpoint({"model": model, "opt": opt}, store, session)
    cold = drop_page_cache()
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
            drop_page_cache()
        started = time.perf_counter()
        _kernel_seconds(base_code)
        total = time.perf_counter() - started
        if cold:
            drop_page_cache()
        t0 = time.perf_counter()
        for folder, _, files in os.walk(store):
            for name in files:
                (Path(folder) / name).read_bytes()
        read = time.perf_counter() - t0
        return {"total": total, "read": read, "budget": total + 0.3 * read}

    def ours_run() -> float:
        if cold:
            drop_page_cache()
        started = time.perf_counter()
        _kernel_seconds(ours_code)
        return time.perf_counter() - started

    def one_pair(i: int) -> dict[str, Any]:
        pair: dict[str, Any] = {}
        for which in orders(i + 1, ("ours", "base"))[i]:
            if which == "ours":
                pair["ours"] = ours_run()
            else:
                pair["base"] = base_run()
            settle()
        pair["ratio"] = pair["ours"] / pair["base"]["budget"]
        log(
            f"  pair {i + 1}: resume to next cell {pair['ours']:.2f} s, budget {pair['base']['budget']:.2f} s "
            f"(kernel + torch + read {pair['base']['total']:.2f} s, of which read {pair['base']['read']:.2f} s), "
            f"ratio {pair['ratio']:.3f}"
        )
        return pair

    runs = pair_loop("6", cfg, one_pair)
    scratch.remove(store)
    return {
        "name": "6 resume request -> next cell (new kernel)",
        "size": "budget = new kernel + import torch + raw read of the same bytes, read allowed 1.3x",
        "ours_s": statistics.median(p["ours"] for p in runs),
        "base_s": statistics.median(p["base"]["budget"] for p in runs),
        "ratio": summarise([p["ratio"] for p in runs]),
        "figure": ("cold" if cold else "WARM") + " page cache",
        "n": len(runs),
        "pairs": runs,
    }


# -- case 7: frozen backbone, case 9: change detection cost ----------------------------------------


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
        "size": f"{frozen / GIB:.2f} GiB frozen + {trainable / 1e6:.1f} MB trainable (AdamW on it); {how}",
        "ours_s": statistics.median(p["second"]["seconds"] for p in runs),
        "base_s": statistics.median(p["first"]["seconds"] for p in runs),
        "ratio": summarise([p["ratio"] for p in runs]),
        "figure": f"wrote {written / 1e6:.1f} of {second['bytes_total'] / 1e6:.0f} MB",
        "n": len(runs),
        "pairs": runs,
    }


def case_detection_cost(cfg: dict[str, Any]) -> dict[str, Any]:
    """Change detection on the CPU: the device fingerprint (torch int64 ops, ``devicehash``) of
    a storage vs xxh3 of the same bytes (what CPU storages use), in seconds per GiB."""
    from jupyter_pause.serialize import devicehash
    from jupyter_pause.store import signing

    size = cfg["detect_bytes"]
    tensor = torch.randn(size // 4)
    storage, view = tensor.untyped_storage(), tensor.numpy().view(np.uint8)
    seed = uuid.uuid4().hex
    devicehash.fingerprint(storage, seed)  # the keys, once per lineage
    contenders = {
        "fingerprint": lambda: devicehash.fingerprint(storage, seed),
        "xxh3": lambda: signing.digest(view, "xxh3_128"),
    }

    def one_pair(i: int) -> dict[str, Any]:
        pair: dict[str, Any] = {"order": list(orders(i + 1, ("fingerprint", "xxh3"))[i])}
        for name in pair["order"]:
            pair[name] = timed(contenders[name])[0] / (size / GIB)
        pair["ratio"] = pair["fingerprint"] / pair["xxh3"]
        log(f"  pair {i + 1}: fingerprint {pair['fingerprint']:.2f} s/GiB, xxh3 {pair['xxh3']:.3f} s/GiB")
        return pair

    runs = pair_loop("9", cfg, one_pair)
    ours, base = (statistics.median(p[k] for p in runs) for k in ("fingerprint", "xxh3"))
    return {
        "name": "9 change detection on CPU: fingerprint vs xxh3",
        "size": f"{size / 1e6:.0f} MB per run, seconds per GiB; one thread of xxh3, torch's threads",
        "ours_s": ours,
        "base_s": base,
        "ratio": summarise([p["ratio"] for p in runs]),
        "figure": f"fingerprint {1 / ours:.2f} GiB/s, xxh3 {1 / base:.1f} GiB/s",
        "n": len(runs),
        "pairs": runs,
    }


# -- report ----------------------------------------------------------------------------------------


def verdict(key: str, ratio: float) -> str:
    target = TARGETS[key]
    if target is None:
        return "info"
    return "PASS" if ratio <= target else "FAIL"


def target_text(key: str) -> str:
    return {
        "1": "<= 0.125 (>= 8x faster)",
        "2a": "<= 0.6",
        "2b": "<= 1.18 (>= 85% of raw)",
        "3": "<= 0.1",
        "3b": "<= 0.1",
        "4": "<= 0.6",
        "5": "<= 0.25",
        "6": "<= 1.0",
        "7": "<= 0.05",
        "9": "report only",
    }[key]


def print_table(results: dict[str, dict[str, Any]]) -> None:
    head = ("case", "n", "ours s", "baseline s", "ratio", "[min-max]", "target", "result", "note")
    rows = []
    for key, r in results.items():
        ratio = r["ratio"]
        result = verdict(key, ratio["median"])
        rows.append(
            (
                r["name"],
                str(r["n"]),
                f"{r['ours_s']:.2f}",
                f"{r['base_s']:.2f}",
                f"{ratio['median']:.3f}",
                f"[{ratio['min']:.3f}-{ratio['max']:.3f}]",
                target_text(key),
                result,
                r["figure"],
            )
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))
    print()
    print("ratio = median over pairs of (ours time / baseline time); lower is better for ours.")
    print("n = pairs measured; ours s / baseline s = median absolute times, for orientation only.")
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip())
    print()
    for r in results.values():
        print(f"  {r['name']}: {r['size']}")
    print()


# -- profile mode -------------------------------------------------------------------------------


def profile(cfg: dict[str, Any], scratch: Scratch, top: int) -> None:
    """cProfile one checkpoint of case 1, a first and a second checkpoint of case 2, one resume.

    Only the main thread is profiled: blob writes and reads run in the store's thread pool, so
    their time shows as ``acquire`` (waiting on the pool's futures).
    """
    import cProfile
    import pstats

    out_dir = HERE / "results"
    out_dir.mkdir(parents=True, exist_ok=True)

    def profiled(label: str, fn: Callable[..., Any], **kwargs: Any) -> None:
        gc.collect()
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        fn(**kwargs)
        prof.disable()
        wall = time.perf_counter() - t0
        prof.dump_stats(out_dir / f"profile-{label}.prof")
        print(f"\n=== {label}: {wall:.2f} s wall ===")
        pstats.Stats(prof).strip_dirs().sort_stats("tottime").print_stats(top)
        settle()

    ns = build_namespace(cfg)
    store = scratch.fresh("prof-case1")
    lineage.forget()
    profiled("case1-checkpoint", jupyter_pause.checkpoint, store=str(store), session="p1", namespace=ns)
    scratch.remove(store)
    del ns
    settle()

    model, opt, _ = build_model(cfg)
    ns = {"model": model, "opt": opt}
    store = scratch.fresh("prof-case2")
    lineage.forget()
    profiled("case2-first-checkpoint", jupyter_pause.checkpoint, store=str(store), session="p2", namespace=ns)
    with torch.no_grad():
        next(iter(model.parameters())).add_(1e-4)
    profiled("case3-second-checkpoint", jupyter_pause.checkpoint, store=str(store), session="p2", namespace=ns)
    del ns, model, opt
    settle()
    cold = drop_page_cache()
    target: dict[str, Any] = {}
    lineage.forget()
    label = f"case4-resume-{'cold' if cold else 'warm'}"
    profiled(label, jupyter_pause.resume, store=str(store), session="p2", namespace=target)
    scratch.remove(store)


# -- main ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer pairs (about 1 minute)")
    parser.add_argument(
        "--dir", type=Path, help="folder for temporary data (default: temp dir on the default store's disk)"
    )
    parser.add_argument("--pairs", type=int, help="pairs per comparison (default: 5-9 by case; see CONFIGS)")
    parser.add_argument(
        "--only", default="1,2,3,4,5,6,7,9", help="comma-separated cases to run (default 1,2,3,4,5,6,7,9)"
    )
    parser.add_argument("--frozen-gb", type=float, help="case 7: GiB of frozen backbone (default 1, quick 0.125)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--profile", action="store_true", help="only cProfile one checkpoint of cases 1-3 and one resume"
    )
    parser.add_argument("--json", type=Path, default=HERE / "results" / "latest.json", help="where to write results")
    args = parser.parse_args(argv)

    mode = "quick" if args.quick else "full"
    cfg = dict(CONFIGS[mode])
    if args.pairs:
        cfg["pairs"] = {case: args.pairs for case in cfg["pairs"]}
        cfg["budget_s"] = {case: 1e9 for case in cfg["budget_s"]}  # no early stop
    if args.frozen_gb:
        cfg["frozen_bytes"] = int(args.frozen_gb * GIB)
    only = {c.strip() for c in args.only.split(",") if c.strip()}
    base = args.dir if args.dir is not None else default_base_dir()
    scratch = Scratch(base)
    log(f"mode {mode}, pairs per case {cfg['pairs']}, temporary data in {scratch.root}")
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    try:
        if args.profile:
            profile(cfg, scratch, top=25)
            return 0
        # Warm up imports and first-call costs of every contender, untimed.
        warm = scratch.fresh("warmup")
        small = {"x": np.arange(100_000.0), "d": [{"i": 1}], "m": torch.nn.Linear(8, 8)}
        lineage.forget()
        jupyter_pause.checkpoint(store=str(warm / "store"), session="warmup", namespace=small)
        jupyter_pause.resume(store=str(warm / "store"), session="warmup", namespace={})
        mod = types.ModuleType("warm_ns")
        mod.__dict__.update(small)
        dill.dump_module(str(warm / "w.pkl"), module=mod)
        torch.save(small["m"].state_dict(), warm / "w.pt")
        torch.load(warm / "w.pt")
        scratch.remove(warm)

        if "1" in only:
            results["1"] = case_namespace(cfg, scratch)
            settle()
        if only & {"2", "3", "4", "5", "6"}:
            model, opt, d = build_model(cfg)
            state = sum(v.nbytes for v in tensor_views(model, opt))
            log(f"model: {cfg['layers']} x Linear({d}, {d}) + AdamW state = {state / GIB:.2f} GiB")
            if "2" in only:
                log("case 2: checkpoint vs torch.save+fsync vs raw write+fsync")
                results["2a"], results["2b"] = case_tensor_write(model, opt, scratch, cfg)
                settle()
            if "3" in only:
                log("case 3: second checkpoint after changing one parameter tensor")
                results["3"] = case_incremental(model, opt, scratch, cfg)
                settle()
                log("case 3b: the same in a session resumed from its store")
                results["3b"] = case_incremental_resumed(model, opt, scratch, cfg)
                settle()
            if "4" in only:
                log("case 4: resume vs torch.load")
                results["4"] = case_restore(model, opt, scratch, cfg)
                settle()
            if "5" in only:
                log("case 5: checkpoint_async blocked time vs a synchronous checkpoint")
                results["5"] = case_async(model, opt, scratch, cfg)
                settle()
            if "6" in only:
                log("case 6: resume request -> next cell in a new kernel")
                results["6"] = case_resume_to_next_cell(model, opt, scratch, cfg)
            del model, opt
            gc.collect()
        if "7" in only:
            log("case 7: frozen backbone, periodic checkpoint after one training step vs the first")
            results["7"] = case_frozen_backbone(scratch, cfg)
            settle()
        if "9" in only:
            log("case 9: change detection per GiB on CPU, device fingerprint vs xxh3")
            results["9"] = case_detection_cost(cfg)
    finally:
        scratch.close()

    elapsed = time.perf_counter() - started
    print_table(results)
    log(f"total {elapsed:.0f} s")
    report = {
        "mode": mode,
        "config": cfg,
        "elapsed_s": elapsed,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "dir": str(base),
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "dill": dill.__version__,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "method": "paired runs in one process, alternating order; ratio = median of per-pair "
        "(ours seconds / baseline seconds)",
        "results": {
            key: {**r, "target": TARGETS[key], "verdict": verdict(key, r["ratio"]["median"])}
            for key, r in results.items()
        },
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2, default=str))
    log(f"wrote {args.json}")
    missed = [k for k, r in results.items() if verdict(k, r["ratio"]["median"]) == "FAIL"]
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
