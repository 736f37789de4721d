#!/usr/bin/env python
"""The GPU-hours report at Hub scale, on a real S3 server: raw events against roll-ups.

    .venv/bin/python benchmarks/ledger.py [--users 10] [--days 30] [--events 10,100] [--json FILE]

For each events-per-user-day figure, a synthetic ledger (``--users`` users, each with one GPU
kernel that starts, writes activity records, is paused and resumed every day, over ``--days``
settled days) is written to SeaweedFS on 127.0.0.1 (``tests/s3_server.py``), then the report
``jupyter pause hours --since <days> --json`` is built three ways, side by side in one run:

- **raw**: every event read, one object each (what a reader that checks signatures does);
- **cold**: the first reader with roll-ups: it reads the raw events and writes each day's roll-up;
- **warm**: the next reader: one roll-up per day.

It prints the seconds of each, the ratio raw/warm, and warm at the largest figure over warm at
the smallest (what ten times the events costs once rolled up); the three reports must be equal.
Results: stdout and benchmarks/results/ledger.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run from a checkout even where the package is not installed
    sys.path.insert(0, str(HERE.parent))

from jupyter_pause.hours import records, text, timeline, totals  # noqa: E402
from jupyter_pause.store import ledger  # noqa: E402
from jupyter_pause.store.layout import ledger_key  # noqa: E402
from jupyter_pause.store.storage import Store  # noqa: E402
from tests.s3_server import start_server  # noqa: E402

DAY = 86400.0


def synthetic(users: int, days: int, per_day: int, end: float) -> dict[str, bytes]:
    """The ledger's objects: per user and day a kernel start, ``per_day`` activity records, a
    pause and a resume, and a stop; the last day ends two days before ``end`` (settled)."""
    rng = random.Random(per_day)
    first = end - (days + 2) * DAY
    first -= first % DAY
    objects = {}
    for u in range(users):
        base = {
            "v": 1,
            "session": f"user{u}-train",
            "user": f"user{u}",
            "node": "gpu-1",
            "server": f"user{u}",
            "gpus": 1,
        }
        for d in range(days):
            day = first + d * DAY
            rows = [{**base, "event": "kernel_started", "at": day + 3600}]
            step = 60000 / per_day
            rows += [
                {
                    **base,
                    "event": "activity",
                    "at": day + 3600 + (i + 1) * step,
                    "spans": [[day + 3600 + i * step, day + 3600 + i * step + step / 2]],
                }
                for i in range(per_day)
            ]
            rows += [
                {**base, "event": "pause_requested", "at": day + 70000, "trigger": "idle"},
                {**base, "event": "kernel_stopped", "at": day + 70010, "trigger": "idle"},
                {**base, "event": "resume_requested", "at": day + 72000},
                {**base, "event": "kernel_ready", "at": day + 72020, "bytes": 2_000_000_000},
                {**base, "event": "next_cell_run", "at": day + 72100},
                {**base, "event": "kernel_stopped", "at": day + 80000},
            ]
            for row in rows:
                objects[ledger_key(row["at"], f"{rng.getrandbits(32):08x}")] = json.dumps(row).encode()
    return objects


def report(reader: ledger.Cache, since: float, until: float) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    events, _ = reader.read(since - 7 * DAY, until)
    parsed, _ = records.parse_all(events)
    hours = totals.compute(timeline.timelines(parsed), totals.Window(since, until))
    return time.perf_counter() - started, text.to_json(hours)


def run(users: int, days: int, figures: list[int]) -> dict[str, Any]:
    server = start_server()
    try:
        fs = server.filesystem()
        env = server.env()
        options = {"key": env["AWS_ACCESS_KEY_ID"], "secret": env["AWS_SECRET_ACCESS_KEY"]}
        options["client_kwargs"] = {"endpoint_url": env["AWS_ENDPOINT_URL"]}
        out: dict[str, Any] = {"users": users, "days": days, "machine": platform.platform(), "runs": []}
        until = time.time()
        since = until - (days + 2) * DAY
        for per_day in figures:
            url = f"s3://{server.bucket}/ledger-bench-{per_day}"
            store = Store(url, options)
            objects = synthetic(users, days, per_day, until)
            started = time.perf_counter()
            store.write_many(objects)
            wrote = time.perf_counter() - started
            raw, a = report(ledger.Cache(store, rollups=False), since, until)
            cold, b = report(ledger.Cache(store), since, until)
            warm, c = report(ledger.Cache(store), since, until)
            assert a == b == c, "the reports from roll-ups differ from the raw events'"
            row = {"events_per_user_day": per_day, "events": len(objects), "write_s": wrote}
            row |= {"raw_s": raw, "cold_s": cold, "warm_s": warm, "raw_over_warm": raw / warm}
            out["runs"].append(row)
            print(
                f"{per_day:>4} events/user-day ({len(objects)} events): raw {raw:.2f} s, cold {cold:.2f} s, "
                f"warm {warm:.2f} s (raw/warm {raw / warm:.0f}x); written in {wrote:.1f} s",
                flush=True,
            )
            fs.rm(url.removeprefix("s3://"), recursive=True)
        runs = out["runs"]
        if len(runs) > 1:
            out["warm_largest_over_smallest"] = runs[-1]["warm_s"] / runs[0]["warm_s"]
            print(
                f"warm at {runs[-1]['events_per_user_day']} over {runs[0]['events_per_user_day']} events/user-day: "
                f"{out['warm_largest_over_smallest']:.2f}x"
            )
        return out
    finally:
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=10)
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--events", default="10,100", help="events per user-day, comma list")
    p.add_argument("--json", default=str(HERE / "results" / "ledger.json"))
    args = p.parse_args()
    result = run(args.users, args.days, [int(x) for x in args.events.split(",")])
    Path(args.json).parent.mkdir(exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
