"""Would a pause fit in the notice's lead time? What each running session's newest checkpoint took.

A pause at a notice writes what changed since the session's newest checkpoint, so the newest
checkpoint's duration (its manifest's ``timings``: requested to committed) is the best guess of
what the pause will take when nothing was checkpointed since; the slowest running session is
the one that decides.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ...errors import StoreError
from ...store.catalog import Catalog
from ...store.layout import manifest_id, manifest_prefix
from ...store.manifest import Manifest

#: Seconds a session's newest checkpoint, once listed, is taken as still its newest (``Durations``).
REFRESH = 60.0

#: What the advice suggests, where a pause would not fit.
PERIODIC = (
    'checkpoint periodically (%checkpoint --every 10 --async, or jupyter_pause.steps(..., every="10m") '
    "in a training loop): a pause then writes only what changed since, and where it still cannot "
    "finish, a recent checkpoint is there to resume"
)


@dataclass(frozen=True)
class Fit:
    """The slowest running session's newest checkpoint, against the cloud's lead time."""

    cloud: str
    lead_time: float
    seconds: float
    session: str
    checkpoint: str

    @property
    def fits(self) -> bool:
        """Whether the checkpoint took no longer than the notice gives."""
        return self.seconds <= self.lead_time

    def advice(self) -> str:
        """One sentence: what the last checkpoint took against the notice, and what to do when it does not fit."""
        cloud = self.cloud.upper()
        a = "an" if cloud[:1] in "AEIOU" else "a"
        said = f"your last checkpoint took {self.seconds:.0f} s; {a} {cloud} notice gives {self.lead_time:.0f} s"
        if self.fits:
            return f"{said}: a pause fits"
        return f"{said}: a pause at the notice would not finish in time ({self.session}); {PERIODIC}"

    def public(self) -> dict[str, Any]:
        """What the status endpoint shows (``fit``)."""
        return {**asdict(self), "fits": self.fits, "advice": self.advice()}


class Durations:
    """The newest checkpoint of each session and what it took; each manifest is read once.

    The watcher asks at every poll, for every running session. A session's checkpoints are
    listed again only once ``refresh`` seconds have passed since they were, or when this server
    changed the session's state since (``changed``: a pause or a checkpoint it asked for), so a
    poll costs no request per session. A checkpoint the kernel took by itself (``%checkpoint``,
    periodic ones) is seen within ``refresh`` seconds.
    """

    def __init__(self, catalog: Catalog, refresh: float = REFRESH, clock: Callable[[], float] = time.time) -> None:
        self.catalog = catalog
        self.refresh = refresh
        self.clock = clock
        self._known: dict[tuple[str, str], float | None] = {}
        #: When each session's checkpoints were last listed, and the newest id then (None: none).
        self._listed: dict[str, tuple[float, str | None]] = {}

    def newest(self, session: str, changed: float | None = None) -> tuple[str, float] | None:
        """``(checkpoint id, seconds it took)`` of the session's newest checkpoint; None when it has
        none, or its manifest is damaged or does not say. ``changed``: when this server last
        changed the session's state (``time.time()``), None when it never did."""
        listed = self._listed.get(session)
        if listed is None or self._stale(listed[0], changed):
            when = self.clock()
            try:
                keys = self.catalog.store.list(manifest_prefix(session))
            except StoreError:
                return None
            ids = sorted(i for key in keys if (i := manifest_id(key)) is not None)
            listed = self._listed[session] = (when, ids[-1] if ids else None)  # ids begin with their time
        newest = listed[1]
        if newest is None:
            return None
        if (session, newest) not in self._known:
            self._known[(session, newest)] = self._took(session, newest)
        seconds = self._known[(session, newest)]
        return None if seconds is None else (newest, seconds)

    def _stale(self, listed_at: float, changed: float | None) -> bool:
        """Whether checkpoints listed at ``listed_at`` are to be listed again."""
        return self.clock() - listed_at >= self.refresh or (changed is not None and changed >= listed_at)

    def _took(self, session: str, checkpoint: str) -> float | None:
        try:
            manifest = self.catalog.manifest(session, checkpoint)
        except (FileNotFoundError, StoreError):
            return None
        if not isinstance(manifest, Manifest):
            return None
        timings = manifest.timings or {}
        if "requested" not in timings or "committed" not in timings:
            return None
        return max(0.0, float(timings["committed"]) - float(timings["requested"]))


def slowest(
    durations: Durations,
    sessions: list[str],
    cloud: str,
    lead_time: float,
    changed: Mapping[str, float] | None = None,
) -> Fit | None:
    """The ``Fit`` of the running session whose newest checkpoint took longest (None: none has one).
    ``changed``: when this server last changed each session's state (see ``Durations.newest``)."""
    changed = changed or {}
    found = [
        (took[1], session, took[0])
        for session in sessions
        if (took := durations.newest(session, changed.get(session))) is not None
    ]
    if not found:
        return None
    seconds, session, checkpoint = max(found)
    return Fit(cloud, lead_time, seconds, session, checkpoint)
