"""Cases 2a and 2b: a checkpoint of a model and AdamW against ``torch.save`` + fsync and a raw write + fsync."""

from __future__ import annotations

import statistics
from typing import Any

import torch

from . import shared
from .shared import Scratch


def case_tensor_write(
    model: torch.nn.Module, opt: torch.optim.Optimizer, scratch: Scratch, cfg: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Rounds of a checkpoint, ``torch.save`` + fsync and a raw write + fsync of the same state, in
    rotating order; the rows of 2a (against ``torch.save``) and 2b (against the raw write)."""
    ns = {"model": model, "opt": opt}
    views = shared.tensor_views(model, opt)
    raw_bytes = sum(v.nbytes for v in views)

    def run(which: str) -> dict[str, Any]:
        folder = scratch.fresh(f"c2-{which}")
        if which == "ours":
            seconds, res = shared.ours_checkpoint(ns, folder, shared.session_name("c2"))
            out = {"seconds": seconds, "reported_seconds": res.seconds, **res.manifest.stats}
            out["bytes"] = out["bytes_written"]
        elif which == "torch":
            path = folder / "state.pt"
            seconds, _ = shared.timed(lambda: shared.torch_save(model, opt, path))
            out = {"seconds": seconds, "bytes": path.stat().st_size}
        else:
            path = folder / "state.raw"
            seconds, _ = shared.timed(lambda: shared.raw_write(views, path))
            out = {"seconds": seconds, "bytes": raw_bytes}
        scratch.remove(folder)
        return out

    run("ours")  # warm-up, untimed
    shared.settle()
    sequence = shared.orders(cfg["pairs"]["2"], ("ours", "torch", "raw"))

    def one_round(i: int) -> dict[str, Any]:
        order = sequence[i]
        trio: dict[str, Any] = {"order": list(order)}
        for which in order:
            trio[which] = run(which)
            shared.settle()
        o, t, r = trio["ours"], trio["torch"], trio["raw"]
        trio["ratio_torch"] = o["seconds"] / t["seconds"]
        # Throughput fraction: (ours bytes / ours time) / (raw bytes / raw time).
        trio["throughput_fraction_raw"] = (o["bytes"] / o["seconds"]) / (r["bytes"] / r["seconds"])
        shared.log(
            f"  round {i + 1} ({'-'.join(order)}): ours {o['seconds']:.2f} s, torch.save "
            f"{t['seconds']:.2f} s, raw {r['seconds']:.2f} s; ours/torch {trio['ratio_torch']:.3f}, "
            f"ours throughput {trio['throughput_fraction_raw']:.2f} of raw"
        )
        if o["bytes_written"] != o["bytes_total"]:
            shared.log(f"  WARNING: a fresh checkpoint reused {o['bytes_reused']} bytes (content dedupe)")
        return trio

    return rows(shared.pair_loop("2", cfg, one_round), raw_bytes)


def rows(runs: list[dict[str, Any]], raw_bytes: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The rows of 2a and 2b from the rounds ``runs`` (``raw_bytes``: what the raw write wrote)."""
    ratios = [p["ratio_torch"] for p in runs]
    fractions = [p["throughput_fraction_raw"] for p in runs]
    ours_s = statistics.median(p["ours"]["seconds"] for p in runs)
    raw_s = statistics.median(p["raw"]["seconds"] for p in runs)
    total = runs[0]["ours"]["bytes_total"]
    common = {
        "ours_s": ours_s,
        "pairs": runs,
        "n": len(runs),
        "size": f"{total / shared.GIB:.2f} GiB model+AdamW state",
    }
    a = {
        **common,
        "name": "2a tensor ckpt vs torch.save+fsync",
        "base_s": statistics.median(p["torch"]["seconds"] for p in runs),
        "ratio": shared.summarise(ratios),
        # No checkpoint beats writing its bytes raw: when the disk is slow, raw itself can be
        # above 0.6x torch.save, and then so is the target's floor.
        "floor": shared.summarise([p["raw"]["seconds"] / p["torch"]["seconds"] for p in runs]),
        "figure": f"{statistics.median(ratios):.2f}x the time; raw write+fsync itself "
        f"{statistics.median(p['raw']['seconds'] / p['torch']['seconds'] for p in runs):.2f}x (the floor)",
    }
    b = {
        **{k: v for k, v in common.items() if k != "pairs"},
        "name": "2b tensor ckpt vs raw write+fsync",
        "base_s": raw_s,
        "ratio": shared.summarise([p["ours"]["seconds"] / p["raw"]["seconds"] for p in runs]),
        "throughput_fraction": shared.summarise(fractions),
        "figure": f"{statistics.median(fractions):.0%} of raw throughput "
        f"(ours {total / ours_s / 1e9:.2f} GB/s, raw {raw_bytes / raw_s / 1e9:.2f} GB/s)",
    }
    return a, b
