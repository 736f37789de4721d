"""Would a pause fit in the notice's lead time? What each running session's newest checkpoint took.

A pause at a notice writes what changed since the session's newest checkpoint, so the newest
checkpoint's duration (its manifest's ``timings``: requested to committed) is the best guess of
what the pause will take when nothing was checkpointed since; the slowest running session is
the one that decides.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...errors import StoreError
from ...store.catalog import Catalog
from ...store.layout import manifest_id, manifest_prefix
from ...store.manifest import Manifest

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
    """The newest checkpoint of each session and what it took; each manifest is read once."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._known: dict[tuple[str, str], float | None] = {}

    def newest(self, session: str) -> tuple[str, float] | None:
        """``(checkpoint id, seconds it took)`` of the session's newest checkpoint; None when it has
        none, or its manifest is damaged or does not say."""
        try:
            keys = self.catalog.store.list(manifest_prefix(session))
        except StoreError:
            return None
        ids = sorted(i for key in keys if (i := manifest_id(key)) is not None)
        if not ids:
            return None
        newest = ids[-1]  # ids begin with the time they were taken, to the second
        if (session, newest) not in self._known:
            self._known[(session, newest)] = self._took(session, newest)
        seconds = self._known[(session, newest)]
        return None if seconds is None else (newest, seconds)

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


def slowest(durations: Durations, sessions: list[str], cloud: str, lead_time: float) -> Fit | None:
    """The ``Fit`` of the running session whose newest checkpoint took longest (None: none has one)."""
    found = [(took[1], session, took[0]) for session in sessions if (took := durations.newest(session)) is not None]
    if not found:
        return None
    seconds, session, checkpoint = max(found)
    return Fit(cloud, lead_time, seconds, session, checkpoint)
