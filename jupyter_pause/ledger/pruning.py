"""Removing the raw records of settled days whose roll-up holds them (``jupyter pause gc
--ledger-older-than``), never on a roll-up's word alone.

Anyone with a shared store's credential can write a roll-up into a user's prefix: one that
counts the day's records and holds none of them would, taken at its word, have the user's raw
records removed and their hours gone from every report. So a day's raw records go only when its
roll-up holds exactly what those records give (``rollup.held``), summarised with the keys here
or with none (a roll-up written by a reader without keys, such as a server's panel, merges no
signed record): a planted or outdated roll-up keeps the raw records, and the report says so.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass
from typing import Any

from ..errors import IntegrityError, StoreError
from ..store.layout import LEDGER, ledger_of
from ..store.storage import Store
from . import rollup
from .book import roll_up
from .checking import KeysFor


@dataclass(frozen=True)
class Pruned:
    """What ``prune_raw`` did (or would do) with one day's raw records: removed them, or kept them and why."""

    day: str
    records: int
    bytes: int
    kept: str = ""


def prune_raw(
    store: Store, older_than: float, now: float | None = None, dry_run: bool = False, keys: KeysFor | None = None
) -> list[Pruned]:
    """Remove the raw records of the days that ended over ``older_than`` seconds ago and whose
    roll-up is whole and holds exactly what they give (summarised with ``keys``, the keys each
    user's records are checked with, or with none); a roll-up is never removed. A day without a
    usable roll-up, or whose roll-up does not hold its records, is kept and named."""
    now = time.time() if now is None else now
    days: dict[str, dict[str, Any]] = {}
    for path, entry in store.list(LEDGER).items():
        if ledger_of(path):
            days.setdefault(rollup.day_of(path.rsplit("/", 1)[0] + "/"), {})[path] = entry
    done = []
    for day, entries in sorted(days.items()):
        ended = calendar.timegm(time.strptime(day, "%Y%m%d")) + 86400
        if now - ended <= older_than:
            continue
        size = sum(getattr(e, "size", 0) or 0 for e in entries.values())
        why = _unheld(store, day, list(entries), keys)
        if why:
            done.append(Pruned(day, len(entries), size, kept=f"kept: {why}"))
            continue
        if not dry_run:
            store.delete(list(entries))
        done.append(Pruned(day, len(entries), size))
    return done


def _unheld(store: Store, day: str, raw: list[str], keys: KeysFor | None) -> str | None:
    """Why the roll-up of ``day`` does not stand for its raw records ``raw`` (keys), or None when it does."""
    try:
        found = rollup.decode(store.read(rollup.key(day)), day)
    except FileNotFoundError:
        return "it has no roll-up yet (a report over that day writes it)"
    except (StoreError, IntegrityError) as e:  # a store error, or a seal that does not open here
        return f"its roll-up cannot be read here ({e})"
    if isinstance(found, str):
        return found
    if found.raw != len(raw):
        return f"its roll-up counts {found.raw} records, the folder holds {len(raw)}"
    records = store.read_many(raw, small=True)
    stored = rollup.held(found.records, found.malformed)
    for with_keys in dict.fromkeys([keys, None]):
        if rollup.held(*roll_up(records, with_keys)) == stored:
            return None
    return (
        "its roll-up does not hold what the day's raw records give (written with other keys, or by someone "
        "else: the records stay)"
    )
