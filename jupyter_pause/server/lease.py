"""A lease in the store: at most one resume of a session at a time, across servers.

Each store gets one of two protocols, chosen once per ``Store`` (``protocol``):

**create-if-absent**, where the store refuses a second create of a key by itself (a local folder;
S3 and GCS servers that honour the condition, as ``Store.atomic_create`` finds out). Every taking
of the lease is a new record ``lease/<epoch>.json``, epochs counting up from 1; the lease belongs
to the record with the highest epoch while that record is live: not expired, and with no
``lease/<epoch>.released`` mark beside it. To take the lease, a claimant lists the epochs, finds
the highest, E, and refuses (``LeaseHeld``) if E is live. Otherwise it creates E+1 with
create-if-absent. Exactly one claimant's create of E+1 succeeds; a loser reads E+1 and refuses,
naming the winner. The winner then lists again and holds the lease only if no epoch above its own
exists; it then prunes the records and marks below E (it keeps E and its own). Release writes
the mark; a record is never deleted while it could be the highest.

Why two claimants P (epoch p) and Q (epoch q > p) never hold at once. (1) The highest epoch in
the store never goes down: records are never overwritten, and one is deleted only by a pruner
whose own, higher record exists. (2) Before P's create nothing at or above p existed: a record
at p still there would have refused the create, and one pruned since, or any record above p,
leaves by (1) an epoch above p for P's second listing to see. (3) Let F be the first record above
p ever created; Q's is one, so F came no later. F's claimant listed after P's create (before it,
by (2), it would have created p at most) and before anything above p existed, so it saw p as the
highest and created p+1. In between it read P's record, not yet pruned (that takes a record at
p+2 or above), and found it expired or released. So Q's lease starts after P's has ended, as far
as clocks agree on expiry, as with any lease.

This needs what S3 and GCS give since 2020: a listing made after a write completes shows it
(``Store`` forgets s3fs's cached listings for this). A create whose reply was lost and that was
sent again comes back "exists": the claimant reads the record, finds its own token and goes on
as the winner. A torn or foreign record at the top is no lease: it is passed over by creating the
next epoch, which one claimant alone wins.

**settle**, for every other store: the lease is ``lease.json``, taken by read, write, wait, read
back: a claim is held only if it is still the one in the store after ``settle`` seconds, and a
claimant whose read-to-write gap exceeded half of ``settle`` gives up and tries again. Safe only
while the store's write skew stays below ``settle``.

Older servers know only ``lease.json`` (the settle protocol). So that a fleet mid-upgrade stays
safe, a create-if-absent claimant refuses while a live ``lease.json`` names anyone but the holder
of the highest epoch, and the winner mirrors its record there (removed on release), which older
servers read as a held lease. A claim by an old and a new server in the same instant is not
excluded: upgrade every server that shares a store before relying on the new protocol.
Leases expire, so a crashed holder blocks no one for long.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from dataclasses import dataclass

from ..errors import PauseError, StoreError
from ..store import seals
from ..store.layout import lease_epoch, lease_epoch_key, lease_key, lease_prefix, lease_released_key
from ..store.signing import Keys
from ..store.storage import Store

log = logging.getLogger(__name__)

#: The two protocols, as ``protocol`` names them.
CREATE_IF_ABSENT = "create-if-absent"
SETTLE = "settle"
#: Looks at the lease before giving up when it keeps changing hands under a claimant.
ATTEMPTS = 8
#: The fields of a lease record on disk, the same in both protocols and in release 0.1.0.
_FIELDS = {"holder": str, "node": str, "token": str, "expires": (int, float), "what": str}


class LeaseHeld(PauseError):
    """Another resume holds the session."""


@dataclass
class Lease:
    """Who holds a session, until when; ``epoch`` is 0 for a lease taken by the settle protocol."""

    holder: str
    node: str
    token: str
    expires: float
    what: str
    epoch: int = 0

    def live(self) -> bool:
        """Whether the lease has not expired yet."""
        return self.expires > time.time()

    def record(self, session: str = "", keys: Keys = None) -> bytes:
        """The lease as stored: the fields every version reads, the epoch being in the key; sealed
        for ``session`` with ``keys`` when given."""
        fields = {name: getattr(self, name) for name in _FIELDS}
        return seals.sealed_json(fields, seals.LEASE, seals.session_place(session), keys)


#: Lease records found and ignored by this process (session: why), for the session's status.
IGNORED: dict[str, str] = {}


def _ignore(session: str, what: str) -> None:
    """Name an ignored record in ``IGNORED``; the log says it once, not at every read of it."""
    if IGNORED.get(session) != what:
        log.warning("lease of session %r: ignored %s", session, what)
    IGNORED[session] = what


def protocol(store: Store) -> str:
    """How leases are taken in ``store``: ``"create-if-absent"`` or ``"settle"`` (may probe it once)."""
    return CREATE_IF_ABSENT if store.atomic_create else SETTLE


def _parse(data: bytes, epoch: int = 0, session: str = "", keys: Keys = None) -> Lease | None:
    """The lease in a record, or None for one that is not a lease (torn, foreign, wrong types;
    with ``keys``, unsigned or sealed by another key or for another session: named in ``IGNORED``)."""
    try:
        fields = json.loads(data)
    except ValueError:
        return None
    if not isinstance(fields, dict):
        return None
    if not all(isinstance(fields.get(name), kind) for name, kind in _FIELDS.items()):
        return None
    why = seals.opened_json(fields, seals.LEASE, seals.session_place(session), keys)
    if why is not None:
        _ignore(session, f"a lease record naming {fields['holder']} on {fields['node']}: {why}")
        return None
    return Lease(**{name: fields[name] for name in _FIELDS}, epoch=epoch)


def _load(store: Store, key: str, epoch: int = 0, session: str = "", keys: Keys = None) -> Lease | None:
    """The lease at ``key``: None if it is not a lease; ``FileNotFoundError`` if nothing is there."""
    return _parse(bytes(store.read(key)), epoch, session, keys)


def _read(store: Store, key: str, epoch: int = 0, session: str = "", keys: Keys = None) -> Lease | None:
    """The lease at ``key``, or None if there is none (absent, torn, foreign)."""
    try:
        return _load(store, key, epoch, session, keys)
    except FileNotFoundError:
        return None


def _refusal(session: str, held: Lease) -> LeaseHeld:
    until = time.strftime("%H:%M:%S UTC", time.gmtime(held.expires))
    return LeaseHeld(
        f"session {session!r} is being {held.what} by {held.holder} on {held.node} (until {until}); "
        "wait for it to finish"
    )


def _epochs(store: Store, session: str) -> tuple[set[int], set[int]]:
    """The epochs that have a record, and those marked released."""
    records: set[int] = set()
    released: set[int] = set()
    for key in store.list(lease_prefix(session)):
        found = lease_epoch(key)
        if found is not None:
            (released if found[1] else records).add(found[0])
    return records, released


def _top(store: Store, session: str, keys: Keys = None) -> tuple[int, Lease | None, bool] | None:
    """The highest epoch, its lease (None if torn) and whether it is released; None if it vanished."""
    records, released = _epochs(store, session)
    top = max(records | released, default=0)
    if top == 0 or top not in records:
        return top, None, True
    try:
        record = _load(store, lease_epoch_key(session, top), top, session, keys)
    except FileNotFoundError:
        return None  # pruned between the listing and the read: a higher epoch exists, look again
    return top, record, top in released and _released(store, session, record, keys)


def _released(store: Store, session: str, record: Lease | None, keys: Keys) -> bool:
    """Whether the release mark beside ``record`` (the top epoch's lease) counts: always without
    ``keys``; with them, only a mark they sealed for this epoch and this lease's token."""
    if record is None or keys is None:
        return True
    try:
        mark = json.loads(bytes(store.read(lease_released_key(session, record.epoch))))
    except (FileNotFoundError, ValueError):
        return False
    why = "not a release mark"
    if isinstance(mark, dict):
        why = seals.opened_json(mark, seals.LEASE, _mark_place(session, record.epoch), keys) or (
            None if mark.get("token") == record.token else "it releases another lease"
        )
    if why is not None:
        _ignore(session, f"a release mark of the lease held by {record.holder} on {record.node}: {why}")
    return why is None


def _mark_place(session: str, epoch: int) -> dict[str, str | None]:
    """Where a release mark belongs: its lease's place and epoch."""
    return {**seals.session_place(session), "epoch": str(epoch)}


def _look(store: Store, session: str, keys: Keys = None) -> tuple[int, Lease | None] | None:
    """The highest epoch and the live lease holding the session (None if free); None if the
    listing changed under the look (look again)."""
    legacy = _read(store, lease_key(session), 0, session, keys)
    top = _top(store, session, keys)
    if top is None:
        return None
    epoch, record, released = top
    if record is not None and not released and record.live():
        return epoch, record
    if legacy is not None and legacy.live() and (record is None or legacy.token != record.token):
        return epoch, legacy  # taken by a server that knows only lease.json (not a mirror of ``record``)
    return epoch, None


def current(store: Store, session: str, keys: Keys = None) -> Lease | None:
    """The live lease of ``session``, whichever protocol took it, or None (with ``keys``, a record
    they did not seal for this session holds nothing)."""
    if not store.atomic_create:
        legacy = _read(store, lease_key(session), 0, session, keys)
        return legacy if legacy is not None and legacy.live() else None
    for _ in range(ATTEMPTS):
        look = _look(store, session, keys)
        if look is not None:
            return look[1]
    raise LeaseHeld(f"could not read the lease of session {session!r}: it kept changing; try again")


def _claim(store: Store, session: str, holder: str, node: str, what: str, seconds: float, keys: Keys = None) -> Lease:
    """The create-if-absent protocol (see the module docstring)."""
    for _ in range(ATTEMPTS):
        look = _look(store, session, keys)
        if look is None:
            continue
        epoch, held = look
        if held is not None:
            raise _refusal(session, held)
        mine = Lease(holder, node, secrets.token_hex(8), time.time() + seconds, what, epoch + 1)
        key = lease_epoch_key(session, mine.epoch)
        if not store.create(key, mine.record(session, keys)):
            winner = _read(store, key, mine.epoch, session, keys)
            if winner is not None and winner.live() and winner.token != mine.token:
                raise _refusal(session, winner)
            if winner is None or winner.token != mine.token:
                continue  # over already, or unreadable: look again
            # else our create went through and only its reply was lost: go on as the winner
        records, marks = _epochs(store, session)
        if max(records | marks) > mine.epoch:
            continue  # a late claim at an epoch others had moved past: never the lease
        _won(store, session, mine, records | marks, epoch, keys)
        return mine
    raise LeaseHeld(
        f"could not take the lease of session {session!r}: it changed hands {ATTEMPTS} times while "
        "this server looked; try again"
    )


def _won(store: Store, session: str, mine: Lease, epochs: set[int], keep: int, keys: Keys = None) -> None:
    """Mirror the new lease for older servers; prune the epochs below ``keep``."""
    try:
        store.write(lease_key(session), mine.record(session, keys))
    except StoreError:
        release(store, session, mine, keys)
        raise
    stale = sorted(e for e in epochs if e < keep)
    keys = [key for e in stale for key in (lease_epoch_key(session, e), lease_released_key(session, e))]
    try:
        store.delete(keys)
    except StoreError as e:  # the lease is held; old epochs only cost a longer listing next time
        log.warning("lease of session %r: could not prune epochs %s: %s", session, stale, e)


async def _settle(
    store: Store, session: str, holder: str, node: str, what: str, seconds: float, settle: float, keys: Keys = None
) -> Lease:
    """The settle protocol (see the module docstring)."""
    key = lease_key(session)
    ours: set[str] = set()  # the tokens of this claimant's own claims, too slow to be sure of
    for _ in range(5):
        started = time.monotonic()
        held = await asyncio.to_thread(_read, store, key, 0, session, keys)
        if held is not None and held.live() and held.token not in ours:
            raise _refusal(session, held)
        mine = Lease(holder, node, secrets.token_hex(8), time.time() + seconds, what)
        ours.add(mine.token)
        await asyncio.to_thread(store.write, key, mine.record(session, keys))
        if time.monotonic() - started > settle / 2:
            continue  # too slow between look and claim to be sure: look again
        await asyncio.sleep(settle)
        after = await asyncio.to_thread(_read, store, key, 0, session, keys)
        if after is not None and after.token == mine.token:
            return mine
        if after is not None:
            raise _refusal(session, after)
    raise LeaseHeld(f"could not take the lease of session {session!r}: the store is too slow to tell; try again")


async def acquire(
    store: Store, session: str, holder: str, node: str, what: str, seconds: float, settle: float, keys: Keys = None
) -> Lease:
    """Take the lease of ``session`` for ``seconds`` or raise ``LeaseHeld`` naming who has it.

    Parameters
    ----------
    store, session
        Where the lease lives and whose it is.
    holder, node, what
        Named in the refusal other claimants get: ``"server pid 12"``, ``"node-a"``, ``"resumed"``.
    seconds
        How long the lease holds unless released.
    settle
        Seconds the settle protocol waits before reading its claim back (unused where the store
        has create-if-absent).
    keys
        The user's signing keys: the records are sealed with them, and a record they did not
        seal for this session holds nothing (it is named in ``IGNORED``).
    """
    if await asyncio.to_thread(protocol, store) == CREATE_IF_ABSENT:
        return await asyncio.to_thread(_claim, store, session, holder, node, what, seconds, keys)
    return await _settle(store, session, holder, node, what, seconds, settle, keys)


def release(store: Store, session: str, lease: Lease, keys: Keys = None) -> None:
    """Give the lease back, if it is still ours.

    The mirror goes first: while it is removed the record still holds the session, so no new
    holder can have mirrored itself in between.
    """
    mirror = _read(store, lease_key(session), 0, session, keys)
    if mirror is not None and mirror.token == lease.token:
        store.delete([lease_key(session)])
    if lease.epoch:
        record = _read(store, lease_epoch_key(session, lease.epoch), lease.epoch, session, keys)
        if record is not None and record.token == lease.token:
            mark = {"released": time.time(), "token": lease.token}
            sealed = seals.sealed_json(mark, seals.LEASE, _mark_place(session, lease.epoch), keys)
            store.write(lease_released_key(session, lease.epoch), sealed)
