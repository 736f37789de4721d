"""The GPU-hours ledger: one small record per event (a kernel started, a pause, a resume, ...),
kept in the store beside the checkpoints, and what reads it back.

``events`` is what a record is; ``checking`` which records to believe (sealed with the user's key
for their user and day, a copy counted once); ``book`` writes them and reads them back, settled
days from their roll-ups (``rollup``, with the busy spans packed by ``spans``). The writers are
named for what they record: ``session.kernel_events`` (a kernel's cells and checkpoints),
``server.session_events`` (what the server does to sessions, GPUs held) and
``hub.server_events`` (servers the Hub started and stopped); ``hours`` turns the records into
GPU hours.

It may import ``store`` and the root modules only (see ``jupyter_pause.layers``).
"""

from __future__ import annotations

from .book import SETTLED, Cache, lost, read, roll_up, write, write_many
from .checking import (
    BAD_SIGNATURE,
    FOREIGN,
    REPLAYED,
    UNSIGNED,
    VERDICTS,
    VERIFIED,
    KeysFor,
    Signer,
    checked,
    encode,
    seal,
    sign_with,
    stands_for,
    trust,
    unreplayed,
)
from .events import (
    ID,
    SERVER_RECORDS,
    SIGNATURE,
    VERSION,
    Event,
    current_user,
    make,
    resume_events,
    server_label,
)

__all__ = [
    "BAD_SIGNATURE",
    "FOREIGN",
    "ID",
    "REPLAYED",
    "SERVER_RECORDS",
    "SETTLED",
    "SIGNATURE",
    "UNSIGNED",
    "VERDICTS",
    "VERIFIED",
    "VERSION",
    "Cache",
    "Event",
    "KeysFor",
    "Signer",
    "checked",
    "current_user",
    "encode",
    "lost",
    "make",
    "read",
    "resume_events",
    "roll_up",
    "seal",
    "server_label",
    "sign_with",
    "stands_for",
    "trust",
    "unreplayed",
    "write",
    "write_many",
]
