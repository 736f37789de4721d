"""Case 4: a resume into a fresh dict against ``torch.load`` + ``load_state_dict``, from a cold page cache."""

from __future__ import annotations

import statistics
from typing import Any

import torch

import jupyter_pause
from jupyter_pause.session import lineage

from . import shared
from .shared import Scratch


def case_restore(
    model: torch.nn.Module, opt: torch.optim.Optimizer, scratch: Scratch, cfg: dict[str, Any]
) -> dict[str, Any]:
    """resume() into a fresh dict vs torch.load of the torch.save file into a live model and
    optimizer (built beforehand, untimed), page cache dropped first. A raw read of the .pt is
    measured too: the floor no restore from this disk can go below."""
    store, session = scratch.fresh("c4-store"), shared.session_name("c4")
    shared.ours_checkpoint({"model": model, "opt": opt}, store, session)
    pt = scratch.fresh("c4-torch") / "state.pt"
    shared.torch_save(model, opt, pt)
    probe = next(iter(model.parameters())).detach().clone()
    live_model, live_opt, _ = shared.build_model(cfg)
    shared.settle()
    cold = shared.drop_page_cache()

    def torch_restore() -> None:
        state = torch.load(pt, map_location="cpu")
        live_model.load_state_dict(state["model"])
        live_opt.load_state_dict(state["opt"])

    def run(which: str, verify: bool) -> float:
        if cold:
            shared.drop_page_cache()
        if which == "ours":
            target: dict[str, Any] = {}
            lineage.forget()
            seconds, res = shared.timed(
                lambda: jupyter_pause.resume(store=str(store), session=session, namespace=target)
            )
            if verify:
                back = next(iter(target["model"].parameters()))
                assert torch.equal(back, probe), "resumed parameters differ from the saved ones"
                assert len(target["opt"].state) == len(list(target["model"].parameters()))
            del target, res
        elif which == "torch":
            seconds, _ = shared.timed(torch_restore)
            if verify:
                assert torch.equal(next(iter(live_model.parameters())), probe)
        else:
            seconds, _ = shared.timed(pt.read_bytes)
        shared.collect()
        return seconds

    sequence = shared.orders(cfg["pairs"]["4"], ("ours", "torch", "raw"))

    def one_pair(i: int) -> dict[str, Any]:
        order = sequence[i]
        pair: dict[str, Any] = {"order": list(order)}
        for which in order:
            pair[which] = {"seconds": run(which, verify=i == 0)}
        pair["ratio"] = pair["ours"]["seconds"] / pair["torch"]["seconds"]
        pair["floor"] = pair["raw"]["seconds"] / pair["torch"]["seconds"]
        shared.log(
            f"  round {i + 1} ({'-'.join(order)}): resume {pair['ours']['seconds']:.2f} s, torch.load + "
            f"load_state_dict {pair['torch']['seconds']:.2f} s, raw read {pair['raw']['seconds']:.2f} s; "
            f"ratio {pair['ratio']:.3f} (floor {pair['floor']:.3f})"
        )
        return pair

    runs = shared.pair_loop("4", cfg, one_pair)
    ours_bytes, torch_bytes = shared.dir_bytes(store), pt.stat().st_size
    scratch.remove(store)
    scratch.remove(pt.parent)
    ratios = [p["ratio"] for p in runs]
    return {
        "name": f"4 resume vs torch.load+load_state_dict ({'cold' if cold else 'WARM'} cache)",
        "size": f"store {ours_bytes / shared.GIB:.2f} GiB, .pt {torch_bytes / shared.GIB:.2f} GiB",
        "ours_s": statistics.median(p["ours"]["seconds"] for p in runs),
        "base_s": statistics.median(p["torch"]["seconds"] for p in runs),
        "ratio": shared.summarise(ratios),
        "figure": (
            "page cache dropped before each run" if cold else "page cache could NOT be dropped: warm-cache figures"
        )
        + f"; raw read of the .pt itself {statistics.median(p['floor'] for p in runs):.2f}x (the floor)",
        "cold_cache": cold,
        "n": len(runs),
        "pairs": runs,
    }
