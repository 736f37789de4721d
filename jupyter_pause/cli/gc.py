"""``jupyter pause gc``: remove garbage and, on request, old checkpoints, judged with the keys here.

The store is opened with this process's keys (``PauseConfig.open_store``), as the server and a
scheduled job open it: only checkpoints those keys verify count toward ``--keep`` and
``--older-than``, and a manifest they do not verify is named, never counted, and kept (with
every blob) unless ``--remove-unverified`` is given.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from .. import units
from ..ledger import pruning
from ..store.catalog import Catalog
from ..store.layout import check_session
from ..store.retention import DEFAULT_GRACE_SECONDS, Kind, collect, sweep_pool
from ..store.survey import Survey
from ..store.uploads import unlisted as unlisted_uploads
from . import hours


def run(args: argparse.Namespace, catalog: Catalog) -> tuple[Any, str]:
    """The command: collect each session (``--session``: one), then sweep the pool once; print
    what went (``--dry-run``: what would go, and why) and what was not counted."""
    if args.keep is not None and args.keep < 1:
        raise ValueError("--keep must be at least 1 (to remove a whole session, delete its folder)")
    if args.older_than is not None and args.older_than <= 0:
        raise ValueError("--older-than must be a positive age, such as 7d")
    if args.ledger_older_than is not None and args.ledger_older_than <= 0:
        raise ValueError("--ledger-older-than must be a positive age, such as 90d")
    # One reading of the store for every session and the pool: each listing, each manifest once.
    survey = Survey.take(catalog, grace=args.grace)
    sessions = [check_session(args.session)] if args.session else survey.sessions
    reports = [
        collect(
            catalog,
            session,
            keep=args.keep,
            older_than=args.older_than,
            dry_run=args.dry_run,
            pool=False,
            remove_unverified=args.remove_unverified,
            survey=survey,
        )
        for session in sessions
    ]
    removed = [key for r in reports for key in r.manifests_removed()]
    swept = sweep_pool(catalog, dry_run=args.dry_run, removed=removed, survey=survey)  # once, after every session
    unlisted = unlisted_uploads(catalog.store)
    counts = {str(kind): sum(r.counts()[str(kind)] for r in [*reports, swept]) for kind in Kind}
    data = {
        "dry_run": args.dry_run,
        "counts": counts,
        "bytes_freed": sum(r.bytes_freed for r in reports) + swept.bytes_freed,
        "uploads_unlisted": unlisted,
        "signing_key": catalog.store.keys is not None,
        "sessions": [{**asdict(r), "counts": r.counts()} for r in reports],
        "pool": {**asdict(swept), "counts": swept.counts()},
    }
    if args.ledger_older_than is not None:
        keys = hours.ledger_keys()  # the keys `jupyter pause hours` checks each user's records with
        pruned = pruning.prune_raw(catalog.store, args.ledger_older_than, dry_run=args.dry_run, keys=keys)
        data["ledger"] = [asdict(p) for p in pruned]
    lines = [line for r in [*reports, swept] for line in r.lines(args.dry_run)]
    if unlisted:
        lines.append(f"incomplete uploads not looked for: {unlisted}")
    verb = "would remove" if args.dry_run else "removed"
    for p in data.get("ledger", []):
        if p["kept"]:
            lines.append(f"ledger {p['day']}: {p['records']} raw records {p['kept']}")
        else:
            size = units.size(p["bytes"])
            lines.append(f"ledger {p['day']}: {verb} {p['records']} raw records ({size}); its roll-up stays")
    return data, "\n".join(lines) or "nothing to clean"


def add_parser(sub: Any, common: argparse.ArgumentParser, duration: Any) -> argparse.ArgumentParser:
    """``jupyter pause gc`` and its options (``duration``: the parser of ``7d``-style ages)."""
    gc = sub.add_parser(
        "gc",
        parents=[common],
        help="remove garbage (blobs no checkpoint of any session names, abandoned writes, incomplete uploads); "
        "with --keep or --older-than, old checkpoints too",
    )
    gc.add_argument("--keep", type=int, help="also remove checkpoints beyond the newest N of each lineage")
    gc.add_argument("--older-than", type=duration, help="also remove checkpoints older than this (e.g. 7d)")
    gc.add_argument(
        "--grace",
        type=duration,
        default=DEFAULT_GRACE_SECONDS,
        help="leave garbage younger than this alone: it may belong to a checkpoint being written (default 1h)",
    )
    gc.add_argument(
        "--ledger-older-than",
        type=duration,
        help="also remove the raw ledger records of days older than this whose roll-up holds them (e.g. 90d)",
    )
    gc.add_argument(
        "--remove-unverified",
        action="store_true",
        help="also remove manifests the signing keys here do not verify (unsigned, another key's, misplaced), "
        "once older than --grace: by default they are kept, never counted, and keep every blob",
    )
    gc.add_argument("--dry-run", action="store_true", help="list what would be removed and why, with size and age")
    return gc
