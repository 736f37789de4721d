"""The server's node record (``protocol.nodestate``) as this kernel follows it, and what it tells the user.

Only the server knows whether its preemption watcher can read the cloud's notice, and whether a
pause would finish within it; it writes both to a record its kernels read. The status widget
follows that record: one daemon thread re-reads it every ``REFRESH`` seconds while any widget
follows (it waits on an event between reads, and ends with the last follower), and hands a
change to the followers on that thread, so a change shows within ``REFRESH`` seconds even while a
cell runs. The text status reads the record when it is shown.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..protocol import nodestate
from ..protocol.nodestate import NodeState
from ..vocabulary import WatcherState

log = logging.getLogger(__name__)

#: Seconds between two reads of the record while a widget follows it.
REFRESH = 2.0

Observer = Callable[[NodeState | None], None]


def lines(state: NodeState | None) -> list[str]:
    """What in the server's record needs the user's attention, one line each: a watcher that
    cannot read its notice (cloud, state, last error), ``preemption_notices = "auto"`` that has
    found no cloud yet (what each probe got), and a pause that would not fit the notice."""
    if state is None:
        return []
    said = []
    for w in state.watchers:
        if w.state == WatcherState.BLIND:
            said.append(
                f"{(w.cloud or 'cloud').upper()} preemption notice: {w.state}, a preemption would go unseen: {w.error}"
            )
        elif w.state == WatcherState.SEARCHING and w.error:
            said.append(
                "preemption notices: no cloud metadata service answered yet, a preemption would go unseen "
                f"until one does ({w.error})"
            )
    if state.fit is not None and not state.fit.fits:
        said.append(f"preemption: {state.fit.advice}")
    return said


class Follower:
    """The record as last read, re-read every ``period`` seconds while anyone follows it."""

    def __init__(self, read: Callable[[], NodeState | None] = nodestate.read, period: float = REFRESH) -> None:
        self.read = read
        self.period = period
        self.current: NodeState | None = None
        self.observers: list[Observer] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> NodeState | None:
        """Read the record now; the followers hear of it when it changed. The record."""
        state = self.read()
        with self._lock:
            changed, self.current = state != self.current, state
            observers = list(self.observers)
        if changed:
            for observer in observers:
                try:
                    observer(state)
                except Exception:  # one broken view stops neither the others nor the thread
                    log.warning("jupyter-pause: a status view failed to show the server's record", exc_info=True)
        return state

    def follow(self, observer: Observer) -> None:
        """Hand ``observer`` each change of the record, from now on."""
        with self._lock:
            self.observers.append(observer)
            if self._thread is None:
                self._stop = threading.Event()
                self._thread = threading.Thread(
                    target=self._run, args=(self._stop,), name="jupyter-pause node record", daemon=True
                )
                self._thread.start()

    def unfollow(self, observer: Observer) -> None:
        """Stop handing ``observer`` changes; the last one to go ends the thread."""
        with self._lock:
            if observer in self.observers:
                self.observers.remove(observer)
            if not self.observers and self._thread is not None:
                self._stop.set()
                self._thread = None

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self.period):
            self.refresh()


#: The record as this kernel follows it.
follower = Follower()
