"""Each session's state (ready, checkpointing, paused, waiting, restoring, failed), kept in the store."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import StoreError
from ..store.layout import status_key
from ..store.storage import Store
from ..vocabulary import SESSION_STATES, SessionState

log = logging.getLogger(__name__)


@dataclass
class Status:
    """A session's state as this server and every other one sharing the store sees it."""

    session: str
    state: str = SessionState.READY
    detail: str = ""
    path: str | None = None
    node: str = ""
    checkpoint: str | None = None
    verdict: str | None = None
    updated: float = field(default_factory=time.time)
    moments: dict[str, float] = field(default_factory=dict)
    #: The release that paused the session (its server was stopped after), if one did.
    release: str | None = None
    #: Checkpoints whose manifest verifies but whose blobs a resume found damaged (id: why):
    #: later resumes and the sessions panel pass over them without reading them again.
    damaged: dict[str, str] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        """The fields the status endpoint returns."""
        return asdict(self)


class StatusBoard:
    """States of sessions: this server's in memory, everyone's in the store."""

    #: Seconds a state read from the store is reused: every open notebook polls its state.
    cache_seconds = 2.0

    def __init__(self, store: Store, node: str) -> None:
        self.store = store
        self.node = node
        self.local: dict[str, Status] = {}
        self._read_at: dict[str, tuple[float, Status | None]] = {}

    def record(self, session: str, state: str, detail: str = "", **fields: Any) -> Status:
        """Move ``session`` to ``state`` in this server's view (no I/O: safe inside the event loop)."""
        if state not in SESSION_STATES:
            raise ValueError(f"unknown state {state!r}: a session is {', '.join(SESSION_STATES)}")
        previous = self.local.get(session) or Status(session)
        status = Status(
            **{
                **asdict(previous),
                **fields,
                "state": state,
                "detail": detail,
                "node": self.node,
                "updated": time.time(),
            }
        )
        self.local[session] = status
        self._read_at.pop(session, None)
        return status

    def persist(self, status: Status) -> None:
        """Write ``status`` to the store so other servers see it."""
        try:
            self.store.write(status_key(status.session), json.dumps(asdict(status)).encode())
        except StoreError as e:
            # The store being down must not stop a pause from failing cleanly: this server's
            # view stays right, other servers see the state once the store is back.
            log.warning("jupyter-pause: state of %s not written to the store: %s", status.session, e)

    def set(self, session: str, state: str, detail: str = "", **fields: Any) -> Status:
        """``record`` then ``persist``."""
        status = self.record(session, state, detail, **fields)
        self.persist(status)
        return status

    def get(self, session: str) -> Status | None:
        """The newest of this server's view and the store's (another node may have moved on)."""
        local = self.local.get(session)
        shared = self.read(session)
        if local is None or (shared is not None and shared.updated > local.updated):
            return shared
        return local

    def read(self, session: str, fresh: bool = False) -> Status | None:
        """The state written to the store for ``session``, if any (reused for ``cache_seconds``
        unless ``fresh``: a decision to start a kernel must not rest on a state seconds old)."""
        cached = self._read_at.get(session)
        if not fresh and cached is not None and time.monotonic() - cached[0] < self.cache_seconds:
            return cached[1]
        status = self._read(session)
        self._read_at[session] = (time.monotonic(), status)
        return status

    def _read(self, session: str) -> Status | None:
        try:
            data = json.loads(bytes(self.store.read(status_key(session))))
        except (FileNotFoundError, StoreError, ValueError):
            return None
        return Status(**{k: v for k, v in data.items() if k in Status.__dataclass_fields__})
