#!/usr/bin/env python
"""What does a safe point cost when nothing is due?

    .venv/bin/python benchmarks/loops.py [--items N] [--pairs P] [--json FILE]

Paired runs in one process, order alternating: a bare ``for`` over ``range(N)`` against the same
loop through ``jupyter_pause.steps(..., every="1h")``, first with what every loop registers (pause
and SIGTERM handling), then with ``%checkpoint --every`` registered too. Figures: the median ratio
of the pairs, and the extra time per item (for orientation). Results: stdout and
benchmarks/results/loops.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run from a checkout even where the package is not installed
    sys.path.insert(0, str(HERE.parent))

import jupyter_pause as jp  # noqa: E402
from jupyter_pause.engine import loops  # noqa: E402
from jupyter_pause.kernel.autocheckpoint import Periodic  # noqa: E402


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--json", type=Path, default=HERE / "results" / "loops.json")
    args = parser.parse_args()
    results = {"default": measure(args.items, args.pairs)}
    periodic = Periodic(minutes=60, take=lambda: "never due")
    loops.on_safe_point(periodic.at_safe_point)
    try:
        results["with --every"] = measure(args.items, args.pairs)
    finally:
        loops.remove(periodic.at_safe_point)
    for label, figures in results.items():
        print(f"{label:14} steps/bare {figures['ratio']:7.1f}x   +{figures['extra_us_per_item']:.2f} us per item")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
