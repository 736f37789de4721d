"""``jupyter pause hours``: where the GPU hours went, from the ledger, with charts and what-ifs."""

from __future__ import annotations

import argparse
import calendar
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import ledger, units
from ..config import PauseConfig
from ..errors import PauseError
from ..hours import records, text, timeline, totals, whatif
from ..store import placeholders, signing
from ..store.catalog import Catalog
from ..store.layout import SESSIONS, check_session
from ..store.storage import Store

#: Seconds of ledger read before ``--since`` to learn each session's state when the window opens
#: (a session paused before it is then released from its window's start, not a range).
LOOKBACK = 7 * 86400.0
_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S")


def moment(value: str, now: float | None = None) -> float:
    """Epoch seconds of ``7d`` (that long ago) or of a UTC date ``2026-11-16[T09:00]``."""
    now = time.time() if now is None else now
    for form in _FORMATS:
        try:
            return float(calendar.timegm(time.strptime(value, form)))
        except ValueError:
            continue
    try:
        return now - units.seconds(value, bare=None)
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"{value!r} is neither an age (90m, 12h, 7d, 2w) nor a UTC date (2026-11-16 or 2026-11-16T09:00)"
        ) from e


def thresholds(value: str) -> dict[str, float]:
    """``15m,30m,1h,2h`` -> {label: seconds}; each needs its unit and must be positive."""
    out = {}
    for part in (p.strip() for p in value.split(",")):
        try:
            seconds = units.seconds(part, bare=None)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"--what-if: {e}; give a list such as 15m,30m,1h,2h") from e
        if seconds <= 0:
            raise argparse.ArgumentTypeError(f"--what-if: {part!r} is not a positive idle threshold")
        out[part] = seconds
    return out


def price(value: str) -> float:
    """A price: a number, 0 or more."""
    try:
        number = float(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{value!r} is not a price; give a number such as 2.5") from e
    if not number >= 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} is not a price; give a number, 0 or more")
    return number


def store_bytes(store: Store, sessions: list[str]) -> dict[str, int | None]:
    """Bytes the store holds for each of ``sessions`` now (None where unknown): what its own folder
    holds (checkpoints, blobs from before the pool, reports), and its share of the pool's blobs its
    checkpoints name. A blob the checkpoints of several sessions name (the same base model in two
    notebooks) is split evenly among them, so the shares add up to what the pool holds."""
    catalog = Catalog(store)
    named: dict[str, dict[str, int]] = {}  # session -> pool digest -> size
    unread: set[str] = set()  # sessions whose checkpoints cannot be read: their bytes are unknown
    for session in catalog.sessions():
        try:
            manifests = catalog.checkpoints(session, store.keys)  # a planted manifest is no share of the pool
        except PauseError:
            unread.add(session)
            continue
        for manifest in manifests:
            if manifest.pool:
                own = set(manifest.session_blobs)
                named.setdefault(session, {}).update((d, n) for d, n in manifest.blobs.items() if d not in own)
    holders = Counter(digest for blobs in named.values() for digest in blobs)
    found: dict[str, int | None] = {}
    for session in sessions:
        if session in unread:
            found[session] = None
            continue
        try:
            folder = sum(entry.size for entry in store.list(f"{SESSIONS}{check_session(session)}/").values())
        except PauseError:
            found[session] = None
            continue
        share = sum(size / holders[digest] for digest, size in named.get(session, {}).items())
        found[session] = folder + round(share)
    return found


def build(
    raw: list[Any], args: argparse.Namespace, store: Store | None = None, malformed: int = 0
) -> tuple[totals.Hours, list[timeline.Timeline]]:
    """The report over the records ``raw`` (ledger events or dicts) for the options in ``args``."""
    parsed, bad = records.parse_all(raw)
    if args.user:
        parsed = [r for r in parsed if r.user == args.user]
    if args.session:
        parsed = [r for r in parsed if r.session == args.session]
    lines = timeline.timelines(parsed)
    window = totals.Window(args.since, args.until if args.until is not None else time.time())
    hours = totals.compute(lines, window, malformed=malformed + bad, price=args.price, storage_price=args.storage_price)
    if store is not None:
        kernels = [row for row in hours.sessions if row.kind == "kernel"]
        held = store_bytes(store, [row.key for row in kernels])
        for row in kernels:
            row.store_bytes = held[row.key]
    return hours, lines


def ledger_keys(env: dict[str, str] | None = None) -> Callable[[str | None], signing.Keyring | None] | None:
    """The keys each user's ledger records are checked with: derived per user from a Hub's secret
    (``JUPYTER_PAUSE_HUB_SECRET``, with its former ones), else this process's signing keys for
    everyone; None when neither is set (records are then not checked)."""
    per_user = signing.hub_keyrings(dict(os.environ) if env is None else env)
    if per_user is not None:
        return per_user
    ring = PauseConfig().keyring
    return None if ring is None else (lambda _user: ring)


def owner(args: argparse.Namespace, keys_for: Any) -> str | None:
    """The user whose prefix the store is, whose records alone count: ``--user`` where given;
    else the user the store URL is the prefix of, under the configured URL's ``{user}``
    (``JUPYTER_PAUSE_STORE=s3://team/pause/{user}``: ``--store s3://team/pause/ana`` is ana's;
    no ``--store``, this process's user's); else, on a Hub, the user this process works for
    (``JUPYTERHUB_USER``). None where none is known (a Hub service's own ledger, read with the
    Hub's secret: each record counts for the user its key is)."""
    if keys_for is None:
        return None
    if getattr(args, "user", None):
        return str(args.user)
    template = PauseConfig().store
    prefix = placeholders.user_of(getattr(args, "store", None) or template, template) if template else None
    return prefix or os.environ.get("JUPYTERHUB_USER") or None


def _trust_line(counts: dict[str, int] | None, signed_only: bool, prefix: str | None) -> str:
    if counts is None:
        return (
            "ledger signatures not checked: no JUPYTER_PAUSE_SIGNING_KEY or JUPYTER_PAUSE_HUB_SECRET here, and "
            "anyone with the store's credentials can write records"
        )
    unsigned = "not counted" if signed_only else "counted; --signed-only leaves them out"
    return (
        f"ledger signatures: {counts[ledger.VERIFIED]} verified, {counts[ledger.UNSIGNED]} unsigned ({unsigned}), "
        f"{counts[ledger.BAD_SIGNATURE]} with a signature that does not verify (not counted); "
        f"refused: {counts[ledger.FOREIGN]} naming another user than the prefix's, "
        f"{counts[ledger.REPLAYED]} replayed copies of a record already counted; "
        + (
            f"read as {prefix}'s prefix"
            if prefix
            else "read as a shared ledger: each record counts for the user whose key signed it (--user U reads "
            "the store as U's prefix)"
        )
    )


def run(args: argparse.Namespace, store: Store) -> tuple[Any, str]:
    """The command: read the window's events, check their signatures, add them up, print (and draw) them."""
    if args.since is not None and args.until is not None and args.since >= args.until:
        raise ValueError("--since must be before --until")
    signed_only = bool(getattr(args, "signed_only", False))
    keys_for = ledger_keys()
    # settled days from their roll-ups; one this reader writes merges only what its keys verify
    reader = ledger.Cache(store, keys=keys_for)
    events, malformed = reader.read(None if args.since is None else args.since - LOOKBACK, args.until)
    if signed_only and keys_for is None:
        raise PauseError(
            "--signed-only needs the keys that signed the records: set JUPYTER_PAUSE_SIGNING_KEY (one user's), "
            "or JUPYTER_PAUSE_HUB_SECRET (every user's, as the Hub derives them)"
        )
    prefix = owner(args, keys_for)
    events, counts = ledger.checked(events, keys_for, signed_only, prefix)
    hours, lines = build(events, args, store, malformed)
    what = whatif.what_if(lines, hours, args.what_if) if args.what_if else None
    out = text.report(hours) + "\n" + _trust_line(counts, signed_only, prefix)
    out += "".join(f"\nnote: {note}" for note in reader.notes)
    if what is not None:
        out += "\n\n" + text.what_if(*what, price=args.price)
    if args.html:
        from ..hours import page

        path = Path(args.html)
        try:
            path.write_text(page.html(hours, what), encoding="utf-8")
        except OSError as e:
            raise PauseError(f"cannot write the page {path}: {e.strerror}; choose another --html FILE") from e
        out += f"\npage: {path}"
    data = text.to_json(hours, what)
    data["ledger_notes"] = list(reader.notes)
    data["signatures"] = {"checked": False} if counts is None else {"checked": True}
    if counts is not None:
        data["signatures"].update({verdict.replace(" ", "_"): n for verdict, n in counts.items()})
        data["signatures"]["prefix_of"] = prefix
    return data, out


def add_parser(sub: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``jupyter pause hours`` and its options."""
    hours = sub.add_parser("hours", parents=[common], help="GPU-hours held, used and released; charts; what-ifs")
    hours.add_argument("--since", type=moment, help="from this age ago or UTC date (e.g. 7d, 2026-11-16)")
    hours.add_argument("--until", type=moment, help="up to this age ago or UTC date (default: now)")
    hours.add_argument(
        "--user",
        help="only this user's sessions; with keys, the store is read as this user's prefix: a record naming "
        "another user is refused and counted as such (on a Hub, JUPYTERHUB_USER is the default)",
    )
    hours.add_argument("--html", metavar="FILE", help="also write a self-contained page with charts here")
    hours.add_argument("--price", type=price, metavar="GPU_HOUR", help="price of one GPU-hour, for money")
    hours.add_argument("--storage-price", type=price, metavar="GB_MONTH", help="price of a GB-month of store")
    hours.add_argument(
        "--what-if", type=thresholds, metavar="LIST", help="idle thresholds to replay, e.g. 15m,30m,1h,2h"
    )
    hours.add_argument(
        "--signed-only",
        action="store_true",
        help="count only records whose signature verifies (JUPYTER_PAUSE_SIGNING_KEY or JUPYTER_PAUSE_HUB_SECRET)",
    )
    return hours
