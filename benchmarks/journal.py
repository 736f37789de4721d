#!/usr/bin/env python
"""Does the work journal cost the same per item with 10^2 and with 10^5 keys in it?

    .venv/bin/python benchmarks/journal.py [--quick] [--dir DIR] [--json FILE]

For a journal already holding N done keys (N = 10^2 and 10^5; --quick: 10^2 and 10^4), on a local
folder, measured as paired runs in this one process with the order alternating:

  done     ``Journal.done`` of a new key vs ``Store.write`` of the same record bytes to a scratch
           key (one fsync'd write each); figure: median of per-pair ratios
  pending  ``list(Journal.pending(items))`` over the N done keys plus 1000 new ones vs
           ``Store.list`` of the done records alone; figure: median of per-pair ratios

A cost that grew with the journal would show as a larger ratio at the larger N. Absolute times
per item are printed for orientation only. Results: stdout and benchmarks/results/journal.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run from a checkout even where the package is not installed
    sys.path.insert(0, str(HERE.parent))

from jupyter_pause.journal.journal import Journal  # noqa: E402
from jupyter_pause.journal.records import encode_done, item_name  # noqa: E402
from jupyter_pause.store import layout  # noqa: E402
from jupyter_pause.store.storage import Store  # noqa: E402

SESSION, NAME, VERSION = "bench", "ocr", "1"
RESULT = {"text": "x" * 200, "pages": 3}
NEW_ITEMS = 1000
DONE_PAIRS = 200
PENDING_PAIRS = 5


def seed(root: Path, n: int) -> None:
    """Put ``n`` done records straight into the store's folder (untimed; no fsync, to be quick)."""
    for key in range(n):
        path = root / layout.journal_done_key(SESSION, NAME, VERSION, item_name(key))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_done(key, layout.new_run_id(), "bench", RESULT))


def paired(ours: Any, baseline: Any, pairs: int) -> tuple[list[float], list[float]]:
    """Seconds of ``ours(i)`` and ``baseline(i)`` for i in range(pairs), alternating which goes first."""
    mine, theirs = [], []
    for i in range(pairs):
        order = [(ours, mine), (baseline, theirs)]
        for run, into in order if i % 2 == 0 else reversed(order):
            start = time.perf_counter()
            run(i)
            into.append(time.perf_counter() - start)
    return mine, theirs


def measure(base: Path, n: int) -> dict[str, Any]:
    root = base / f"journal-{n}"
    seed(root, n)
    store = Store(str(root))
    journal = Journal(store, SESSION, NAME, VERSION, "bench")
    items = list(range(n + NEW_ITEMS))
    list(journal.pending(items))  # warm the listing path once
    record = encode_done(-1, journal.run, "bench", RESULT)
    prefix = layout.journal_done_prefix(SESSION, NAME, VERSION)

    def done(i: int) -> None:
        journal.done(n + NEW_ITEMS + i, result=RESULT)

    def write(i: int) -> None:
        store.write(f"scratch/{i}", record)

    def pending(_: int) -> None:
        list(journal.pending(items))

    def listing(_: int) -> None:
        store.list(prefix)

    done_s, write_s = paired(done, write, DONE_PAIRS)
    pending_s, list_s = paired(pending, listing, PENDING_PAIRS)
    shutil.rmtree(root)
    return {
        "keys": n,
        "done_us_per_item": statistics.median(done_s) * 1e6,
        "write_us_per_item": statistics.median(write_s) * 1e6,
        "done_vs_write": statistics.median(a / b for a, b in zip(done_s, write_s, strict=True)),
        "pending_us_per_item": statistics.median(pending_s) / len(items) * 1e6,
        "list_us_per_record": statistics.median(list_s) / n * 1e6,
        "pending_vs_list": statistics.median(a / b for a, b in zip(pending_s, list_s, strict=True)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="10^2 and 10^4 keys instead of 10^2 and 10^5")
    parser.add_argument("--dir", help="where the temporary journals go (default: the system temp dir)")
    parser.add_argument("--json", default=str(HERE / "results" / "journal.json"), help="where results go")
    args = parser.parse_args()
    sizes = [100, 10_000 if args.quick else 100_000]
    base = Path(tempfile.mkdtemp(prefix="journal-bench-", dir=args.dir))
    try:
        rows = [measure(base, n) for n in sizes]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"{'keys':>7} {'done us':>8} {'write us':>8} {'done/write':>10} {'pending us':>10} {'pending/list':>12}")
    for r in rows:
        print(
            f"{r['keys']:>7} {r['done_us_per_item']:>8.0f} {r['write_us_per_item']:>8.0f} {r['done_vs_write']:>10.2f} "
            f"{r['pending_us_per_item']:>10.2f} {r['pending_vs_list']:>12.2f}"
        )
    small, large = rows
    growth = {
        "done_vs_write": large["done_vs_write"] / small["done_vs_write"],
        "pending_us_per_item": large["pending_us_per_item"] / small["pending_us_per_item"],
    }
    print(
        f"growth from {small['keys']} to {large['keys']} keys: done/write ratio x{growth['done_vs_write']:.2f}, "
        f"pending cost per item x{growth['pending_us_per_item']:.2f} (1.0 = no growth)"
    )
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"rows": rows, "growth": growth, "node": os.uname().nodename}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
