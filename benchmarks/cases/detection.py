"""Case 9: change detection per GiB on the CPU, the device fingerprint against xxh3 of the same bytes."""

from __future__ import annotations

import statistics
import uuid
from typing import Any

import numpy as np
import torch

from . import shared


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
        pair: dict[str, Any] = {"order": list(shared.orders(i + 1, ("fingerprint", "xxh3"))[i])}
        for name in pair["order"]:
            pair[name] = shared.timed(contenders[name])[0] / (size / shared.GIB)
        pair["ratio"] = pair["fingerprint"] / pair["xxh3"]
        shared.log(f"  pair {i + 1}: fingerprint {pair['fingerprint']:.2f} s/GiB, xxh3 {pair['xxh3']:.3f} s/GiB")
        return pair

    runs = shared.pair_loop("9", cfg, one_pair)
    ours, base = (statistics.median(p[k] for p in runs) for k in ("fingerprint", "xxh3"))
    return {
        "name": "9 change detection on CPU: fingerprint vs xxh3",
        "size": f"{size / 1e6:.0f} MB per run, seconds per GiB; one thread of xxh3, torch's threads",
        "ours_s": ours,
        "base_s": base,
        "ratio": shared.summarise([p["ratio"] for p in runs]),
        "figure": f"fingerprint {1 / ours:.2f} GiB/s, xxh3 {1 / base:.1f} GiB/s",
        "n": len(runs),
        "pairs": runs,
    }
