"""What the Hub service adds to the GPU-hours ledger: single-user servers starting and stopping.

At every check the service lists the running servers; a server ready for the first time is
written as ``server_started`` (at the time the Hub says it started), one gone from the list as
``server_stopped`` (at the check that found it gone, so within ``--check-every`` of the stop;
``trigger`` "release" when the service released it). A ``server_started`` record's key is a
function of the server and its start time, so the service restarting and seeing the same servers
again writes no second record; a server that stops while the service is down has no stop.

The Hub does not know a server's GPUs: ``--server-gpus N`` says how many a server holds, and
``--profile-gpus PROFILE=N`` (repeatable) how many one of that profile holds
(``user_options["profile"]``, as for ``--profile-timeout``).
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from .. import ledger as records
from ..store.storage import Store
from ..vocabulary import LedgerEvent, Trigger
from .policy import ServerView


def parse_profile_gpus(values: Iterable[str]) -> dict[str, int]:
    """``["gpu=1", "big=8"]`` as ``{"gpu": 1, "big": 8}``; ``ValueError`` naming a malformed entry."""
    found: dict[str, int] = {}
    for value in values:
        name, sep, count = value.partition("=")
        if not sep or not name.strip() or not count.strip().isdigit():
            raise ValueError(f"--profile-gpus {value!r}: write PROFILE=COUNT, e.g. gpu=1")
        found[name.strip()] = int(count)
    return found


@dataclass
class ServerLedger:
    """Turns successive listings of the running servers into ledger events."""

    store: Store
    gpus: int = 0
    profile_gpus: dict[str, int] = field(default_factory=dict)
    node: str = field(default_factory=socket.gethostname)
    #: Servers seen ready at the last check, by label, with the event that started them.
    running: dict[str, records.Event] = field(default_factory=dict)
    #: Servers the service is releasing or released (stopped), until a listing shows them gone.
    released: set[str] = field(default_factory=set)

    def _started(self, view: ServerView) -> tuple[records.Event, str]:
        at = view.started.timestamp() if view.started is not None else time.time()
        event = records.make(
            LedgerEvent.SERVER_STARTED,
            self.node,
            at=at,
            user=view.user,
            server=view.label,
            gpus=self.profile_gpus.get(view.profile or "", self.gpus),
        )
        tag = hashlib.sha256(f"{view.label}\0{at!r}".encode()).hexdigest()[:8]
        return event, tag

    def changes(self, views: Iterable[ServerView], now: float | None = None) -> list[tuple[records.Event, str | None]]:
        """The events (with their key tags) that a listing of the running servers means."""
        now = time.time() if now is None else now
        seen = {v.label: v for v in views if v.ready}
        out: list[tuple[records.Event, str | None]] = []
        for label, view in seen.items():
            if label not in self.running:
                event, tag = self._started(view)
                self.running[label] = event
                out.append((event, tag))
        for label in [label for label in self.running if label not in seen]:
            started = self.running.pop(label)
            trigger = Trigger.RELEASE if label in self.released else None
            self.released.discard(label)
            stopped = records.make(
                LedgerEvent.SERVER_STOPPED,
                self.node,
                at=now,
                user=started.user,
                server=label,
                gpus=started.gpus,
                trigger=trigger,
            )
            out.append((stopped, None))
        return out

    async def seen(self, views: Iterable[ServerView]) -> None:
        """Write what a listing of the running servers means (off the event loop; never raises)."""
        for event, tag in self.changes(views):
            await asyncio.to_thread(records.write, self.store, event, tag)
