"""Cases 3 and 3b: the next checkpoint after changing one parameter tensor, against a first checkpoint."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import jupyter_pause
from jupyter_pause.session import lineage

from . import shared
from .shared import Scratch


def second_vs_first(i: int, pair: dict[str, Any], detail: str) -> dict[str, Any]:
    """Close a case-3 pair: its ratio, and a log line with ``detail`` on the second checkpoint."""
    f, s = pair["first"], pair["second"]
    pair["ratio"] = s["seconds"] / f["seconds"]
    shared.log(
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
        store, session = scratch.fresh(f"c{case}"), shared.session_name(f"c{case}")
        seconds, res = shared.ours_checkpoint(ns, store, session)
        return {"seconds": seconds, **res.manifest.stats}, (store, session)

    def following(where: Where, i: int) -> dict[str, Any]:
        noted = change(i) or {}
        seconds, res = shared.timed(
            lambda: jupyter_pause.checkpoint(store=str(where[0]), session=where[1], namespace=ns, trigger=trigger)
        )
        return {"seconds": seconds, **noted, **res.manifest.stats}

    def one_pair(i: int) -> dict[str, Any]:
        nonlocal prev
        pair: dict[str, Any] = {}
        if i % 2 == 0 or prev is None:
            pair["order"] = ["first", "second"]
            pair["first"], where = first()
            shared.settle()
            pair["second"] = following(where, i)
            if prev is not None:
                scratch.remove(prev[0])
        else:
            pair["order"] = ["second", "first"]
            pair["second"] = following(prev, i)
            shared.settle()
            scratch.remove(prev[0])
            pair["first"], where = first()
        shared.settle()
        prev = where
        return second_vs_first(i, pair, detail(pair["second"]))

    try:
        return shared.pair_loop(case, cfg, one_pair)
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
        "ratio": shared.summarise(ratios),
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
    home, session = scratch.fresh("c3b"), shared.session_name("c3b")
    shared.ours_checkpoint(ns, home, session)
    lineage.forget()
    resumed: dict[str, Any] = {}
    jupyter_pause.resume(store=str(home), session=session, namespace=resumed)
    params = list(resumed["model"].parameters())
    shared.settle()

    def one_pair(i: int) -> dict[str, Any]:
        pair: dict[str, Any] = {"order": list(shared.orders(i + 1, ("second", "first"))[i])}
        for which in pair["order"]:
            if which == "second":
                with torch.no_grad():
                    params[(7 * i + 3) % len(params)].mul_(1.001).add_(1e-4)
                seconds, res = shared.ours_checkpoint(resumed, home, session, new_lineage=False)
                pair["second"] = {"seconds": seconds, **res.manifest.stats}
            else:
                store = scratch.fresh("c3b-first")
                seconds, res = shared.ours_checkpoint(ns, store, shared.session_name("c3b-first"))
                pair["first"] = {"seconds": seconds, **res.manifest.stats}
                scratch.remove(store)
            shared.settle()
        s = pair["second"]
        hashed = (s["bytes_total"] - s["bytes_unread"]) / 1e6
        return second_vs_first(
            i, pair, f"hashed {hashed:.0f} of {s['bytes_total'] / 1e6:.0f} MB, wrote {s['bytes_written'] / 1e6:.1f} MB"
        )

    runs = shared.pair_loop("3", cfg, one_pair)
    scratch.remove(home)
    unread = statistics.median(p["second"]["bytes_unread"] for p in runs)
    total = runs[0]["second"]["bytes_total"]
    return {
        "name": "3b the same, in a resumed session",
        "size": "one more parameter changed per pair; unchanged mapped tensors known from page flags",
        "ours_s": statistics.median(p["second"]["seconds"] for p in runs),
        "base_s": statistics.median(p["first"]["seconds"] for p in runs),
        "ratio": shared.summarise([p["ratio"] for p in runs]),
        "figure": f"{unread / total:.0%} of the bytes known unchanged without reading them",
        "n": len(runs),
        "pairs": runs,
    }
