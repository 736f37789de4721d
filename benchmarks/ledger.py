#!/usr/bin/env python
"""The GPU-hours report at Hub scale, on a real S3 server: raw events against roll-ups.

    .venv/bin/python benchmarks/ledger.py [--users 10] [--days 30] [--events 10,100] [--direct]
                                          [--signed] [--quick] [--json FILE]

For each events-per-user-day figure, a synthetic ledger (``--users`` users, each with one GPU
kernel that starts, writes activity records, is paused and resumed every day, over ``--days``
settled days) is written to SeaweedFS on 127.0.0.1 (``tests/support/s3_server.py``), all at once
(``Store.write_many(small=True)``), then the report ``jupyter pause hours --since <days> --json``
is built three ways, side by side in one run:

- **raw**: every event read (all at once, ``Store.read_many(small=True)``), no roll-ups;
- **cold**: the first reader with roll-ups: it reads the raw events and writes each day's roll-up;
- **warm**: the next reader: one roll-up per day, all read at once.

It prints the seconds of each, the ratio raw/warm, the roll-ups' bytes, and warm at the largest
figure over warm at the smallest (what ten times the events costs once rolled up); the three
reports must be equal.

``--direct`` (for Hub-sized figures, whose raw events take longer to write and read here than a
benchmark should): each settled day's roll-up is written by the benchmark from the day's records
with the reader's own functions (``rollup.summarise``, ``rollup.encode``), except for one day in
the middle, whose raw events are written and rolled up by the first reader; that roll-up must
hold exactly the records the benchmark built for it. No raw report then. ``--signed``: every
record is signed with a key, and every reader checks them (as ``jupyter pause hours`` with
``JUPYTER_PAUSE_SIGNING_KEY``): the roll-ups' merged records are signed, and the reports'
signature counts must be equal too. ``--quick``: 5 users, 7 days, 10,100 events per user-day.
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

from jupyter_pause import ledger  # noqa: E402
from jupyter_pause.hours import records, text, timeline, totals  # noqa: E402
from jupyter_pause.ledger import rollup  # noqa: E402
from jupyter_pause.ledger.checking import checked  # noqa: E402
from jupyter_pause.store import signing  # noqa: E402
from jupyter_pause.store.layout import ledger_key  # noqa: E402
from jupyter_pause.store.storage import Store  # noqa: E402
from tests.support.s3_server import start_server  # noqa: E402

DAY = 86400.0
#: The key records are signed with under ``--signed``.
KEY = "benchmark ledger signing key 0f3c"
#: Objects written per ``write_many`` call (each call's objects all in flight at once).
WRITE_BATCH = 20_000


def synthetic(users: int, days: int, per_day: int, end: float) -> dict[int, list[dict[str, Any]]]:
    """The ledger's records by day (its first second): per user and day a kernel start,
    ``per_day`` activity records, a pause and a resume, and a stop; the last day ends two days
    before ``end`` (settled)."""
    first = end - (days + 2) * DAY
    first -= first % DAY
    out: dict[int, list[dict[str, Any]]] = {}
    for d in range(days):
        day = first + d * DAY
        rows = out.setdefault(int(day), [])
        for u in range(users):
            base = {
                "v": 1,
                "session": f"user{u}-train",
                "user": f"user{u}",
                "node": "gpu-1",
                "server": f"user{u}",
                "gpus": 1,
            }
            rows.append({**base, "event": "kernel_started", "at": day + 3600})
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
    return out


def encoded(rows: list[dict[str, Any]], rng: random.Random) -> dict[str, bytes]:
    """The objects of ``rows`` as the ledger writes them (``ledger.encode``: signed under ``--signed``)."""
    return {ledger_key(r["at"], f"{rng.getrandbits(32):08x}"): ledger.encode(ledger.Event.from_dict(r)) for r in rows}


def direct_rollup(day: int, objects: dict[str, bytes], keys_for: Any) -> tuple[str, bytes, list[dict[str, Any]]]:
    """The roll-up a first reader would write for ``day`` from ``objects`` (its raw records), by
    the reader's own function (``ledger.roll_up``)."""
    records_, malformed = ledger.roll_up(objects, keys_for)
    name = time.strftime("%Y%m%d", time.gmtime(day))
    return rollup.key(name), rollup.encode(name, records_, len(objects), malformed), records_


def report(reader: ledger.Cache, since: float, until: float, keys_for: Any) -> tuple[float, dict[str, Any]]:
    """Seconds to build the report over ``since..until`` (read 7 days before, as ``hours``), and its JSON."""
    started = time.perf_counter()
    events, _ = reader.read(since - 7 * DAY, until)
    events, counts = checked(events, keys_for, signed_only=False)
    parsed, _ = records.parse_all(events)
    hours = totals.compute(timeline.timelines(parsed), totals.Window(since, until))
    out = text.to_json(hours)
    out["signatures"] = counts
    return time.perf_counter() - started, out


def write(store: Store, objects: dict[str, bytes]) -> None:
    items = list(objects.items())
    for start in range(0, len(items), WRITE_BATCH):
        store.write_many(dict(items[start : start + WRITE_BATCH]), small=True)


def run(users: int, days: int, figures: list[int], direct: bool, signed: bool) -> dict[str, Any]:
    server = start_server()
    keys_for = (lambda _user: signing.Keyring(KEY)) if signed else None
    ledger.sign_with(KEY if signed else None)
    try:
        fs = server.filesystem()
        env = server.env()
        options = {"key": env["AWS_ACCESS_KEY_ID"], "secret": env["AWS_SECRET_ACCESS_KEY"]}
        options["client_kwargs"] = {"endpoint_url": env["AWS_ENDPOINT_URL"]}
        out: dict[str, Any] = {"users": users, "days": days, "direct": direct, "signed": signed}
        out |= {"machine": platform.platform(), "runs": []}
        until = time.time()
        since = until - (days + 2) * DAY
        for per_day in figures:
            url = f"s3://{server.bucket}/ledger-bench-{per_day}"
            store = Store(url, options)
            rng = random.Random(per_day)
            by_day = synthetic(users, days, per_day, until)
            sample = sorted(by_day)[len(by_day) // 2]
            objects: dict[str, bytes] = {}
            built: dict[str, bytes] = {}
            expected: list[dict[str, Any]] = []
            started = time.perf_counter()
            for day, rows in by_day.items():
                these = encoded(rows, rng)
                if direct and day != sample:
                    key, data, _ = direct_rollup(day, these, keys_for)
                    built[key] = data
                else:
                    objects |= these
                    if direct:
                        expected = direct_rollup(day, these, keys_for)[2]
            built_s = time.perf_counter() - started
            events = sum(len(rows) for rows in by_day.values())
            started = time.perf_counter()
            write(store, objects)
            store.write_many(built, small=True)
            wrote = time.perf_counter() - started
            row: dict[str, Any] = {"events_per_user_day": per_day, "events": events, "raw_objects": len(objects)}
            row |= {"write_s": wrote, "rollups_built_s": built_s if direct else None}
            raw = None
            if not direct:
                raw, a = report(ledger.Cache(store, rollups=False, keys=keys_for), since, until, keys_for)
            cold, b = report(ledger.Cache(store, keys=keys_for), since, until, keys_for)
            warm, c = report(ledger.Cache(store, keys=keys_for), since, until, keys_for)
            if not direct:
                assert a == b == c, "the reports from roll-ups differ from the raw events'"
            else:
                assert b == c, "the first and the next reader's reports differ"
                name = time.strftime("%Y%m%d", time.gmtime(sample))
                written = rollup.decode(store.read(rollup.key(name)), name)
                assert isinstance(written, rollup.Rollup) and written.records == expected, (
                    "the roll-up the first reader wrote differs from the one the benchmark built"
                )
            sizes = [e.size for e in store.list(rollup.ROLLUPS).values()]
            row |= {"raw_s": raw, "cold_s": cold, "warm_s": warm, "raw_over_warm": raw / warm if raw else None}
            row |= {"rollups": len(sizes), "rollup_bytes": sum(sizes), "rollup_bytes_max": max(sizes)}
            row |= {"signatures": c["signatures"], "held_gpu_hours": c["total"]["held_gpu_hours"]}
            out["runs"].append(row)
            said = f"raw {raw:.2f} s, " if raw is not None else ""
            print(
                f"{per_day:>4} events/user-day ({events} events, {len(objects)} raw objects written in {wrote:.1f} s): "
                f"{said}cold {cold:.2f} s, warm {warm:.2f} s"
                + (f" (raw/warm {raw / warm:.0f}x)" if raw else "")
                + f"; {len(sizes)} roll-ups, {sum(sizes) / 1e6:.1f} MB (largest {max(sizes) / 1e3:.0f} kB)",
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
        ledger.sign_with(None)
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=10)
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--events", default="10,100", help="events per user-day, comma list")
    p.add_argument("--direct", action="store_true", help="write the settled days' roll-ups directly (one day raw)")
    p.add_argument("--signed", action="store_true", help="sign every record; readers check them")
    p.add_argument("--quick", action="store_true", help="5 users, 7 days, 10,100 events per user-day")
    p.add_argument("--json", default=str(HERE / "results" / "ledger.json"))
    args = p.parse_args()
    if args.quick:
        args.users, args.days, args.events = 5, 7, "10,100"
    result = run(args.users, args.days, [int(x) for x in args.events.split(",")], args.direct, args.signed)
    Path(args.json).parent.mkdir(exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
