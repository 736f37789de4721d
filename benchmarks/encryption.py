#!/usr/bin/env python
"""What per-user encryption costs: an encrypted pause and resume against unencrypted ones.

    .venv/bin/python benchmarks/encryption.py [--stores local,s3] [--gb 1] [--pairs 5] [--json FILE]

Both contenders sign with the same key (sha256 digests, keyed pool names); one also encrypts
every object (``PauseConfig.encrypt``, AES-256-GCM), the other writes plaintext. The state is
``benchmarks/run.py``'s (``cases/shared.build_model``): bias-free ``nn.Linear`` layers and AdamW
after a step, ``--gb`` GB in all.
Each pair, in alternating order: a **pause** (``jupyter_pause.checkpoint`` into a fresh store)
and a **resume** of that checkpoint into an empty namespace, each contender once. The figure is
the median over pairs of encrypted / plain seconds, with the range; the target is at most
``TARGET``. One untimed pair runs first, so that memory touched for the first time is not
charged to whoever comes first. A local folder, and SeaweedFS for S3
(``tests/support/s3_server.py``), started on 127.0.0.1 and stopped afterwards.

Results: stdout and benchmarks/results/encryption.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run from a checkout even where the package is not installed
    sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from stores import STARTERS, Place  # noqa: E402

import jupyter_pause  # noqa: E402
from benchmarks.cases.shared import build_model  # noqa: E402
from jupyter_pause.config import PauseConfig  # noqa: E402
from jupyter_pause.session import lineage  # noqa: E402

KEY = "benchmark signing key 9c1e"
#: An encrypted pause or resume may take at most this many times an unencrypted one.
TARGET = 1.15
CONTENDERS = ("encrypted", "plain")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _config(place: Place, encrypt: bool) -> PauseConfig:
    return PauseConfig(signing_key=KEY, encrypt=encrypt, storage_options=dict(place.options))


def _one(place: Place, state: dict[str, Any], encrypt: bool) -> tuple[float, float]:
    """Seconds of a pause of ``state`` into a fresh prefix of ``place``, then of its resume."""
    url, session = f"{place.url.rstrip('/')}/{uuid.uuid4().hex}", f"bench-{uuid.uuid4().hex[:8]}"
    config = _config(place, encrypt)
    lineage.forget()
    gc.collect()
    start = time.perf_counter()
    jupyter_pause.checkpoint(store=url, session=session, namespace=dict(state), config=config)
    paused = time.perf_counter() - start
    lineage.forget()
    target: dict[str, Any] = {}
    gc.collect()
    start = time.perf_counter()
    jupyter_pause.resume(store=url, session=session, namespace=target, config=config)
    resumed = time.perf_counter() - start
    assert set(target) >= set(state), f"the resume brought back {sorted(target)}"
    config.open_store(url).delete(list(config.open_store(url).list("")))
    return paused, resumed


def measure(place: Place, state: dict[str, Any], pairs: int) -> dict[str, Any]:
    """Paired encrypted and plain pauses and resumes on ``place``: each pair's seconds and ratios."""
    _one(place, state, True), _one(place, state, False)  # untimed: first-touch memory, clients
    rows = []
    for i in range(pairs):
        order = CONTENDERS if i % 2 == 0 else CONTENDERS[::-1]
        times = {name: _one(place, state, name == "encrypted") for name in order}
        (ep, er), (pp, pr) = times["encrypted"], times["plain"]
        rows.append({"encrypted": [ep, er], "plain": [pp, pr], "pause": ep / pp, "resume": er / pr})
        log(f"  {place.name} pair {i + 1}: pause {ep:.2f}/{pp:.2f} s, resume {er:.2f}/{pr:.2f} s (encrypted/plain)")
    return {"pairs": rows, **{what: _summary([r[what] for r in rows]) for what in ("pause", "resume")}}


def _summary(ratios: list[float]) -> dict[str, float]:
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="local,s3", help="comma-separated, of local, s3")
    parser.add_argument("--gb", type=float, default=1.0, help="state size in GB (default 1)")
    parser.add_argument("--pairs", type=int, default=5, help="pairs per store (default 5)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where data goes (deleted after)")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "encryption.json")
    args = parser.parse_args(argv)
    model, opt, _ = build_model({"layers": 24, "state_bytes": int(args.gb * 1e9)})
    state = {"model": model, "opt": opt}
    results: dict[str, Any] = {"gb": args.gb, "target": TARGET, "machine": platform.platform(), "stores": {}}
    missed = []
    for name in args.stores.split(","):
        place = STARTERS[name](args.dir)
        try:
            log(f"{name}: {args.pairs} pairs of {args.gb} GB")
            results["stores"][name] = found = measure(place, state, args.pairs)
        finally:
            place.stop()
        for what in ("pause", "resume"):
            s = found[what]
            ok = s["median"] <= TARGET
            missed += [] if ok else [f"{name} {what}"]
            spread = f"{s['median']:.2f}x ({s['min']:.2f}-{s['max']:.2f})"
            print(f"{name:6} {what:7} encrypted/plain {spread} target <= {TARGET}  {'ok' if ok else 'MISSED'}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
