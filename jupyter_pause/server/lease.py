"""A lease in the store: at most one resume of a session at a time, across servers.

Object stores have no atomic create-if-absent that every fsspec backend offers, so the lease is
taken by read, write, wait, read back: a claim is held only if it is still the one in the store
after ``settle`` seconds, and a claimant whose read-to-write gap exceeded half of ``settle``
gives up and tries again. Leases expire, so a crashed holder blocks no one for long.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import asdict, dataclass

from ..errors import PauseError
from ..store.layout import lease_key
from ..store.storage import Store


class LeaseHeld(PauseError):
    """Another resume holds the session."""


@dataclass
class Lease:
    """Who holds a session, until when."""

    holder: str
    node: str
    token: str
    expires: float
    what: str


def _read(store: Store, session: str) -> Lease | None:
    try:
        data = json.loads(bytes(store.read(lease_key(session))))
        return Lease(**data)
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        return None  # a torn lease is no lease


async def acquire(
    store: Store, session: str, holder: str, node: str, what: str, seconds: float, settle: float
) -> Lease:
    """Take the lease of ``session`` or raise ``LeaseHeld`` naming who has it."""
    for _ in range(5):
        started = time.monotonic()
        current = await asyncio.to_thread(_read, store, session)
        if current is not None and current.expires > time.time():
            raise LeaseHeld(
                f"session {session!r} is being {current.what} by {current.holder} on {current.node} "
                f"(until {time.strftime('%H:%M:%S UTC', time.gmtime(current.expires))}); wait for it to finish"
            )
        mine = Lease(holder, node, secrets.token_hex(8), time.time() + seconds, what)
        await asyncio.to_thread(store.write, lease_key(session), json.dumps(asdict(mine)).encode())
        if time.monotonic() - started > settle / 2:
            continue  # too slow between look and claim to be sure: look again
        await asyncio.sleep(settle)
        after = await asyncio.to_thread(_read, store, session)
        if after is not None and after.token == mine.token:
            return mine
        if after is not None:
            raise LeaseHeld(
                f"session {session!r} is being {after.what} by {after.holder} on {after.node}; wait for it to finish"
            )
    raise LeaseHeld(f"could not take the lease of session {session!r}: the store is too slow to tell; try again")


def release(store: Store, session: str, lease: Lease) -> None:
    """Give the lease back, if it is still ours."""
    current = _read(store, session)
    if current is not None and current.token == lease.token:
        store.delete([lease_key(session)])
