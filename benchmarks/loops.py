#!/usr/bin/env python
"""What does a safe point cost when nothing is due, and a training loop's periodic checkpoint?

    .venv/bin/python benchmarks/loops.py [--items N] [--pairs P] [--json FILE]
                                         [--period S] [--state-mb M] [--periods K] [--runs R]

Paired runs in one process, order alternating:

- safe points: a bare ``for`` over ``range(N)`` against the same loop through
  ``jupyter_pause.steps(..., every="1h")``, first with what every loop registers (pause and
  SIGTERM handling), then with ``%checkpoint --every`` registered too. Figures: the median ratio
  of the pairs, and the extra time per item (for orientation);
- periodic checkpoints: a training loop (AdamW over bias-free Linear layers holding ``--state-mb``
  of parameters and moments, all changed by every step) through ``steps(loader, every=K)``,
  with K steps about ``--period`` seconds of work, against the same loop with no ``every``; the
  checkpoints as they are taken now (the loop waits for the copy, the write goes on in the
  background) and, beside them, synchronous ones (the loop waits for the commit). Figures: the
  median over runs of (loop throughput with checkpoints / without); the same against the run's
  own steps taken while no checkpoint was being written (steadier where other processes load
  the machine); the seconds the loop waits at a checkpoint's safe point; how much longer a step
  takes while a checkpoint is written beside it.

Results: stdout and benchmarks/results/loops.json.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run from a checkout even where the package is not installed
    sys.path.insert(0, str(HERE.parent))

import jupyter_pause as jp  # noqa: E402
from benchmarks.cases.shared import as_new_kernel  # noqa: E402
from jupyter_pause.kernel.autocheckpoint import Periodic  # noqa: E402
from jupyter_pause.loops import steps as loops  # noqa: E402
from jupyter_pause.session import background, checkpoint  # noqa: E402


def timed(iterable: Any) -> float:
    started = time.perf_counter()
    for _ in iterable:
        pass
    return time.perf_counter() - started


def measure(items: int, pairs: int) -> dict[str, float]:
    """Median ratio (steps / bare) and extra microseconds per item over ``pairs`` pairs."""
    ratios, extra = [], []
    for i in range(pairs):
        if i % 2:
            stepped, bare = timed(jp.steps(range(items), every="1h")), timed(range(items))
        else:
            bare, stepped = timed(range(items)), timed(jp.steps(range(items), every="1h"))
        ratios.append(stepped / bare)
        extra.append((stepped - bare) / items * 1e6)
    return {"ratio": statistics.median(ratios), "extra_us_per_item": statistics.median(extra)}


# -- periodic checkpoints in a training loop ----------------------------------------------------


def training(state_mb: float, layers: int = 8) -> tuple[Any, Any, Any]:
    """A model + AdamW of about ``state_mb`` MB in all, and one step that changes all of it."""
    import torch

    torch.manual_seed(0)
    d = int(math.sqrt(state_mb * 1e6 / 3 / layers / 4))
    model = torch.nn.Sequential(*[torch.nn.Linear(d, d, bias=False) for _ in range(layers)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(64, d)

    def step() -> None:
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()
    return model, opt, step


def aim(store: Path, namespace: dict[str, Any], how: str) -> None:
    """In-loop checkpoints of ``namespace`` go to ``store``: ``background`` as ``steps`` takes
    them, or ``sync``: the loop waits until each one commits."""
    session = f"bench-{store.name}"
    if how == "sync":

        def take(**kw: Any) -> Any:
            real_sync(store=str(store), session=session, namespace=namespace, **kw)
            return types.SimpleNamespace(done=True, error=None)

        checkpoint.checkpoint_async = take
    else:
        checkpoint.checkpoint_async = lambda **kw: real_async(
            store=str(store), session=session, namespace=namespace, **kw
        )


real_async, real_sync = checkpoint.checkpoint_async, checkpoint.checkpoint


def periodic(period: float, state_mb: float, periods: int, runs: int) -> dict[str, Any]:
    """Loop throughput with in-loop checkpoints every ~``period`` s of work, against none."""
    model, opt, step = training(state_mb)
    started = time.perf_counter()
    for _ in range(5):
        step()
    every = max(2, round(period / ((time.perf_counter() - started) / 5)))
    items = periods * every + every // 2  # the last checkpoint has half a period to commit
    namespace = {"model": model, "opt": opt}
    scratch = Path(tempfile.mkdtemp(prefix="jupyter-pause-loops-"))

    def run(how: str, i: int) -> dict[str, Any]:
        store = scratch / f"{how}-{i}"
        as_new_kernel()  # each run as in a new kernel
        aim(store, namespace, how)
        bodies: list[tuple[float, bool]] = []  # (seconds, a background checkpoint was being written)
        gaps: list[float] = []  # seconds from the end of one item to the start of the next
        began = last = time.perf_counter()
        for _ in jp.steps(range(items), every=None if how == "none" else every, name=f"bench-{how}-{i}"):
            start = time.perf_counter()
            gaps.append(start - last)
            writing = background._current is not None and not background._current.done
            step()
            last = time.perf_counter()
            bodies.append((last - start, writing))
        seconds = time.perf_counter() - began
        background.wait_for_background()
        shutil.rmtree(store, ignore_errors=True)
        quiet = statistics.median(b for b, writing in bodies if not writing)
        loud = [b for b, writing in bodies if writing]
        return {
            "seconds": seconds,
            "items_per_s": items / seconds,
            # the same run's own steps, where no checkpoint was being written, as its baseline:
            # load from other processes moves both alike
            "in_run_ratio": items * quiet / seconds,
            "blocked_s": statistics.median(gaps[k] for k in range(every, items, every)) if how != "none" else 0.0,
            "slowdown_while_writing": statistics.median(loud) / quiet if loud else 1.0,
        }

    try:
        aim(scratch / "warm", namespace, "background")  # the staging buffer, first writes: untimed
        for _ in jp.steps(range(2), every=1, name="bench-warm"):
            step()
        background.wait_for_background()
        pairs = []
        for i in range(runs):
            order = ("none", "background", "sync") if i % 2 == 0 else ("sync", "background", "none")
            pair = {how: run(how, i) for how in order}
            pairs.append(pair)
            times = ", ".join(f"{how} {pair[how]['seconds']:.2f} s" for how in ("none", "background", "sync"))
            print(f"  run {i + 1}: {times}", flush=True)
    finally:
        checkpoint.checkpoint_async = real_async
        shutil.rmtree(scratch, ignore_errors=True)
    state = sum(p.numel() * 4 * 3 for p in model.parameters())

    def ratio(how: str) -> float:
        return statistics.median(p[how]["items_per_s"] / p["none"]["items_per_s"] for p in pairs)

    def median(how: str, key: str) -> float:
        return statistics.median(p[how][key] for p in pairs)

    return {
        "state_bytes": state,
        "every_items": every,
        "items": items,
        "checkpoints_per_run": items // every,
        "seconds_between_checkpoints": median("none", "seconds") / items * every,
        "throughput_background": ratio("background"),
        "throughput_sync": ratio("sync"),
        "in_run_background": median("background", "in_run_ratio"),
        "in_run_sync": median("sync", "in_run_ratio"),
        "blocked_background_s": median("background", "blocked_s"),
        "blocked_sync_s": median("sync", "blocked_s"),
        "slowdown_while_writing": median("background", "slowdown_while_writing"),
        "runs": pairs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--period", type=float, default=3.0, help="seconds of work between checkpoints (default 3)")
    parser.add_argument("--state-mb", type=float, default=150.0, help="model + AdamW state in MB (default 150)")
    parser.add_argument("--periods", type=int, default=1, help="checkpoints per timed loop (default 1)")
    parser.add_argument("--runs", type=int, default=9, help="rounds of the three loops (default 9)")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "loops.json")
    args = parser.parse_args()
    results: dict[str, Any] = {"default": measure(args.items, args.pairs)}
    periodic_minutes = Periodic(minutes=60, take=lambda: "never due")
    loops.on_safe_point(periodic_minutes.at_safe_point)
    try:
        results["with --every"] = measure(args.items, args.pairs)
    finally:
        loops.remove(periodic_minutes.at_safe_point)
    for label, figures in results.items():
        print(f"{label:14} steps/bare {figures['ratio']:7.1f}x   +{figures['extra_us_per_item']:.2f} us per item")
    if args.runs > 0:
        print(
            f"training loop, {args.state_mb:g} MB of state, a checkpoint every ~{args.period:g} s of work:", flush=True
        )
        figures = results["periodic"] = periodic(args.period, args.state_mb, args.periods, args.runs)
        print(
            f"periodic       throughput with checkpoints / without: {figures['throughput_background']:.3f}x "
            f"(the loop waits for the copy), {figures['throughput_sync']:.3f}x (waiting for each commit); "
            f"{figures['state_bytes'] / 1e6:.0f} MB every {figures['seconds_between_checkpoints']:.1f} s\n"
            f"               against the same run's quiet steps: {figures['in_run_background']:.3f}x and "
            f"{figures['in_run_sync']:.3f}x; the loop waits {figures['blocked_background_s']:.3f} s per checkpoint "
            f"(synchronous: {figures['blocked_sync_s']:.3f} s); a step takes "
            f"{figures['slowdown_while_writing']:.2f}x as long while one is written"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
