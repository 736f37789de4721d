"""What the sessions panel shows of the ledger: how long a paused session has been paused, and
the GPU-hours its pause has released so far."""

from __future__ import annotations

import time

from .. import ledger
from ..store import seals
from ..vocabulary import LedgerEvent

#: Days of ledger read back at most to find when a session was paused.
LOOKBACK_DAYS = 31
#: Seconds read before a session's own hint of when it was paused (its state's last change).
MARGIN = 3600.0


def paused(
    cache: ledger.Cache, hints: dict[str, float | None], now: float | None = None
) -> dict[str, tuple[float | None, float | None]]:
    """``(paused_since, gpu_hours_released)`` of each paused session in ``hints``.

    ``hints`` maps a session to a time at or after its pause (its state's last change, or its
    newest checkpoint's): only the ledger's day folders from there on are read. The pause is the
    session's last ``kernel_stopped`` not followed by a ``kernel_started`` or ``kernel_ready``;
    the hours are the time since, times the GPUs that kernel held. A session the ledger has no
    stop for keeps its hint as ``paused_since``, and unknown (None) hours. With the store's keys,
    only the records they verify (or unsigned ones) naming this user count (``ledger.checked``):
    a co-tenant's record in this prefix never moves the pause.
    """
    now = time.time() if now is None else now
    known = [h for h in hints.values() if h is not None]
    since = max(min(known, default=now) - MARGIN, now - LOOKBACK_DAYS * 86400)
    events, _ = cache.read(since)
    ring = cache.store.keys
    if ring is not None:  # a record another key signed, or naming another user, is no pause of this user's
        events, _ = ledger.checked(events, lambda _user: ring, False, seals.this_user())
    stops: dict[str, ledger.Event | None] = {}
    for event in events:
        if event.session not in hints:
            continue
        if event.event == LedgerEvent.KERNEL_STOPPED:
            stops[event.session] = event
        elif event.event in (LedgerEvent.KERNEL_STARTED, LedgerEvent.KERNEL_READY):
            stops[event.session] = None
    out: dict[str, tuple[float | None, float | None]] = {}
    for session, hint in hints.items():
        stop = stops.get(session)
        if stop is None:
            out[session] = (hint, None)
        else:
            out[session] = (stop.at, round(max(0.0, now - stop.at) / 3600 * stop.gpus, 4))
    return out
