"""Targets, verdicts and the table ``benchmarks/run.py`` prints."""

from __future__ import annotations

from typing import Any

#: Targets, as the largest acceptable median of (ours time / baseline time); None: report only.
#: Case 8's rows are keyed per store ("8a-local", "8a-s3", ...): each takes its case's target.
TARGETS = {
    "1": 1 / 8,  # ours at least 8x faster than dill.dump_module + fsync
    "2a": 0.6,  # ours at most 0.6x torch.save + fsync (never below raw: see the floor in its note)
    "2b": 1.1,  # at most 1.1x a raw write + fsync of the same bytes
    "3": 0.08,  # second checkpoint after a ~1% change: at most 0.08x a first one
    "3b": 0.1,  # the same in a resumed session (change detection from page flags)
    "4": 0.6,  # resume into live objects, at most 0.6x torch.load, both from a cold page cache
    "5": 0.25,  # --async: time the kernel is blocked, at most 0.25x a synchronous checkpoint
    "6": 1.0,  # resume request -> next cell, at most kernel start + torch import + 1.3x raw read
    "7": 0.05,  # frozen backbone: periodic checkpoint after a training step, at most 0.05x the first
    "8a": 1.2,  # new node, cold: %resume at most 1.2x a raw parallel read of the same objects
    "8b": 0.3,  # new node, after a wait for resources: at most 0.3x a cold resume (click to next cell)
    "8c": 1.0,  # new node, Resume clicked -> next cell: at most kernel start + import torch + raw read
    "9": None,  # change detection per GiB on CPU: device fingerprint vs xxh3, reported only
}

TARGET_TEXT = {
    "1": "<= 0.125 (>= 8x faster)",
    "2a": "<= 0.6",
    "2b": "<= 1.1",
    "3": "<= 0.08",
    "3b": "<= 0.1",
    "4": "<= 0.6",
    "5": "<= 0.25",
    "6": "<= 1.0",
    "7": "<= 0.05",
    "8a": "<= 1.2",
    "8b": "<= 0.3",
    "8c": "<= 1.0",
    "9": "report only",
}


def target(key: str) -> float | None:
    """The target of a row (``8a-s3`` takes case 8a's)."""
    return TARGETS[key.partition("-")[0]]


def verdict(key: str, ratio: float) -> str:
    """PASS, FAIL, or info for a row reported only."""
    wanted = target(key)
    if wanted is None:
        return "info"
    return "PASS" if ratio <= wanted else "FAIL"


def target_text(key: str) -> str:
    """The target as the table shows it."""
    return TARGET_TEXT[key.partition("-")[0]]


def print_table(results: dict[str, dict[str, Any]]) -> None:
    """One row per result: the median ratio, its range, the target and the verdict."""
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
