"""Each session's state (ready, checkpointing, paused, waiting, restoring, failed), kept in the store."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..errors import StoreError
from ..store import seals
from ..store.layout import status_key
from ..store.signing import Keys
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
    #: A record of this session found in the store and ignored (its status.json or lease: why),
    #: unsigned where a signing key is set, another key's, or written for another session: it
    #: blocks, redirects and relabels nothing. "" when none was.
    ignored: str = ""
    #: The kernelspec the session's kernel ran on, as its last pause (or resume) found it: a
    #: resume starts that one (``kernelspecs``). None when no server paused it.
    kernel: str | None = None
    #: A resume's copying of its checkpoint onto this node while it waits and its kernel starts
    #: (``prefetch``): bytes done, of how many, and the rate (bytes a second). Empty otherwise.
    prefetched: dict[str, float] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        """The fields the status endpoint returns."""
        return asdict(self)


def because(why: str, detail: str) -> str:
    """A status detail led by what asked for the change (``why``; none: the detail alone)."""
    return f"{why}; {detail}" if why else detail


class StatusBoard:
    """States of sessions: this server's in memory, everyone's in the store."""

    #: Seconds a state read from the store is reused: every open notebook polls its state.
    cache_seconds = 2.0

    def __init__(self, store: Store, node: str, keys: Keys = None) -> None:
        self.store = store
        self.node = node
        self.keys = keys
        #: Records read from the store and ignored (session: what: why), said in that session's status.
        self.ignored: dict[str, dict[str, str]] = {}
        self.local: dict[str, Status] = {}
        self._read_at: dict[str, tuple[float, Status | None]] = {}
        #: Writes to the store one at a time (``persist``).
        self._writing = threading.Lock()

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
        if state == SessionState.CHECKPOINTING:
            self.ignored.pop(session, None)  # a new pause: what was ignored before was said
        return status

    def persist(self, session: str) -> None:
        """Write ``session``'s newest state in this server's view to the store, so other servers
        see it. A write left to run beside the work it describes may come after the next one's:
        each writes what was recorded last, so the order of recording decides, not the clock."""
        try:
            with self._writing:
                newest = self.local[session]
                record = {k: v for k, v in asdict(newest).items() if k != "ignored"}
                sealed = seals.sealed_json(record, seals.STATUS, seals.session_place(session), self.keys)
                self.store.write(status_key(session), sealed)
        except StoreError as e:
            # The store being down must not stop a pause from failing cleanly: this server's
            # view stays right, other servers see the state once the store is back.
            log.warning("jupyter-pause: state of %s not written to the store: %s", session, e)

    def set(self, session: str, state: str, detail: str = "", **fields: Any) -> Status:
        """``record`` then ``persist``."""
        status = self.record(session, state, detail, **fields)
        self.persist(session)
        return status

    def get(self, session: str) -> Status | None:
        """The newest of this server's view and the store's (another node may have moved on)."""
        local = self.local.get(session)
        shared = self.read(session)
        newest = shared if local is None or (shared is not None and shared.updated > local.updated) else local
        ignored = self.ignored.get(session)
        if not ignored:
            return newest
        said = "; ".join(f"{what} of this session in the store ignored: {why}" for what, why in ignored.items())
        return replace(newest or Status(session, detail="not paused", node=self.node), ignored=said)

    def ignore(self, session: str, what: str, why: str | None) -> None:
        """Note that ``what`` (``status.json``, ``lease``) of ``session`` was ignored, and why (logged
        once); None: it verified (the note goes)."""
        notes = self.ignored.setdefault(session, {})
        if why is None:
            notes.pop(what, None)
            return
        if notes.get(what) != why:
            log.warning("jupyter-pause: the %s of %s in the store is ignored: %s", what, session, why)
        notes[what] = why

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
        place = seals.session_place(session)
        why = seals.opened_json(data, seals.STATUS, place, self.keys) if isinstance(data, dict) else "not JSON"
        if why is not None:
            why += "; so which checkpoint this session was paused from is not known here"
            self.ignore(session, "status.json", why)  # said until this server pauses the session again
            return None
        return Status(**{k: v for k, v in data.items() if k in Status.__dataclass_fields__ and k != "ignored"})
