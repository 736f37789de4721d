"""Case 1: a checkpoint of a namespace of small dicts and numpy arrays against ``dill.dump_module`` + fsync."""

from __future__ import annotations

import statistics
import types
from typing import Any

import dill
import numpy as np

from . import shared
from .shared import Scratch


def build_namespace(cfg: dict[str, Any]) -> dict[str, Any]:
    """``dicts`` small dicts and ``arrays`` random float arrays of ``array_bytes`` in all."""
    rng = np.random.default_rng(1)
    ns: dict[str, Any] = {"records": [{"i": i, "s": str(i), "f": i * 0.5} for i in range(cfg["dicts"])]}
    per = cfg["array_bytes"] // cfg["arrays"] // 8
    for k in range(cfg["arrays"]):
        ns[f"arr{k}"] = rng.random(per)  # distinct contents: nothing dedupes by content key
    return ns


def case_namespace(cfg: dict[str, Any], scratch: Scratch) -> dict[str, Any]:
    """Paired checkpoints of the namespace and ``dill.dump_module`` of a module holding it."""
    shared.log(f"case 1: building {cfg['dicts']:,} dicts + {cfg['array_bytes'] / 1e6:.0f} MB of numpy arrays")
    ns = build_namespace(cfg)
    mod = types.ModuleType("bench_ns")
    mod.__dict__.update(ns)

    def run_ours() -> dict[str, Any]:
        store = scratch.fresh("c1-ours")
        seconds, res = shared.ours_checkpoint(ns, store, shared.session_name("c1"))
        stats = dict(res.manifest.stats)
        scratch.remove(store)
        return {"seconds": seconds, "reported_seconds": res.seconds, **stats}

    def run_dill() -> dict[str, Any]:
        folder = scratch.fresh("c1-dill")
        path = folder / "session.pkl"

        def dump() -> None:
            with open(path, "wb") as f:
                dill.dump_module(f, module=mod)
                shared.fsync_file(f)

        seconds, _ = shared.timed(dump)
        size = path.stat().st_size
        scratch.remove(folder)
        return {"seconds": seconds, "bytes": size}

    run_ours()  # warm-up, untimed: first large allocations and writes of this case
    shared.settle()
    sequence = shared.orders(cfg["pairs"]["1"], ("ours", "dill"))

    def one_pair(i: int) -> dict[str, Any]:
        order = sequence[i]
        pair: dict[str, Any] = {"order": list(order)}
        for which in order:
            pair[which] = run_ours() if which == "ours" else run_dill()
            shared.settle()
        pair["ratio"] = pair["ours"]["seconds"] / pair["dill"]["seconds"]
        shared.log(
            f"  pair {i + 1} ({'-'.join(order)}): ours {pair['ours']['seconds']:.2f} s, "
            f"dill {pair['dill']['seconds']:.2f} s, ratio {pair['ratio']:.3f}"
        )
        return pair

    runs = shared.pair_loop("1", cfg, one_pair)  # the namespace is freed when this function returns
    ratios = [p["ratio"] for p in runs]
    return {
        "name": "1 namespace ckpt vs dill.dump_module+fsync",
        "size": f"{cfg['dicts']:,} dicts + {cfg['array_bytes'] / 1e6:.0f} MB numpy",
        "ours_s": statistics.median(p["ours"]["seconds"] for p in runs),
        "base_s": statistics.median(p["dill"]["seconds"] for p in runs),
        "ratio": shared.summarise(ratios),
        "figure": f"{1 / statistics.median(ratios):.1f}x faster",
        "n": len(runs),
        "pairs": runs,
    }
