"""This server's pause and resume figures for Prometheus, in jupyter-server's own registry (the
process's default one), so its existing ``/metrics`` shows them beside its own.

Series (no session, checkpoint or path as a label: a label per session would grow without end):

- ``jupyter_pause_checkpoints_total{trigger,outcome}``: the checkpoints this server asked its
  kernels for (a pause: button, idle, spot, sigterm, a release's; ``rebalance``: an early
  warning's checkpoint, no pause), ``ok`` or ``failed``;
  a ``%checkpoint`` a notebook takes by itself is the kernel's, not counted here;
- ``jupyter_pause_checkpoint_seconds`` and ``jupyter_pause_checkpoint_bytes`` (histograms): from
  the pause's request to the commit, and the checkpoint's size;
- ``jupyter_pause_resumes_total{verdict}``: resumes by the restore test's verdict (``restored``,
  ``partial``, ``failed`` for a resume that ended without one);
- ``jupyter_pause_resume_wait_seconds`` (histogram): how long resumes waited for resources;
- ``jupyter_pause_sessions{state}``: this server's sessions in each state now;
- ``jupyter_pause_releases_total{state}``: releases ("Pause all and stop server") by how they ended;
- ``jupyter_pause_preemption_watchers{cloud,state}``: this server's preemption watchers by cloud
  and state (``blind``: it cannot read its notice, and a preemption would go unseen).
"""

from __future__ import annotations

import weakref
from collections import Counter as Tally
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..vocabulary import SESSION_STATES
from .stopping import when_stopping

#: Seconds, from a small notebook's pause to a large model's.
SECONDS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)
#: Bytes, from 1 MB to 100 GB.
BYTES = tuple(10.0**e for e in range(6, 12)) + (1e11,)
#: Seconds waited for a GPU, from none to hours.
WAITS = (0.1, 1, 10, 60, 300, 900, 1800, 3600, 7200, 14400)

CHECKPOINTS = Counter(
    "jupyter_pause_checkpoints", "Checkpoints this server asked its kernels for, by trigger and outcome.",
    ["trigger", "outcome"],
)  # fmt: skip
CHECKPOINT_SECONDS = Histogram(
    "jupyter_pause_checkpoint_seconds", "Seconds from a pause's request to its checkpoint's commit.", buckets=SECONDS
)
CHECKPOINT_BYTES = Histogram("jupyter_pause_checkpoint_bytes", "Size of the checkpoints of pauses.", buckets=BYTES)
RESUMES = Counter("jupyter_pause_resumes", "Resumes, by the restore test's verdict.", ["verdict"])
RESUME_WAIT = Histogram("jupyter_pause_resume_wait_seconds", "Seconds resumes waited for resources.", buckets=WAITS)
RELEASES = Counter("jupyter_pause_releases", "Releases (pause all and stop server), by how they ended.", ["state"])

_managers: weakref.WeakSet[Any] = weakref.WeakSet()


class _Sessions(Collector):
    """``jupyter_pause_sessions{state}``, read from each server's board when scraped."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("jupyter_pause_sessions", "Sessions of this server, by state.", labels=["state"])
        counts: Tally[str] = Tally()
        for manager in list(_managers):
            counts.update(status.state for status in list(manager.board.local.values()))
        for state in SESSION_STATES:
            family.add_metric([state], counts.get(state, 0))
        yield family


class _Watchers(Collector):
    """``jupyter_pause_preemption_watchers{cloud,state}``, read from each server's watcher when scraped."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "jupyter_pause_preemption_watchers",
            "Preemption watchers of this server, by cloud and state (blind: a notice would go unseen).",
            labels=["cloud", "state"],
        )
        counts: Tally[tuple[str, str]] = Tally()
        for manager in list(_managers):
            watcher = getattr(manager, "preemption", None)
            if watcher is not None:
                counts.update((w["cloud"] or "", w["state"]) for w in watcher.public()["watchers"])
        for (cloud, state), n in sorted(counts.items()):
            family.add_metric([cloud, state], n)
        yield family


REGISTRY.register(_Sessions())
REGISTRY.register(_Watchers())


def watch(manager: Any) -> None:
    """Count ``manager``'s sessions and preemption watchers until its server stops (another server
    may run later in the same process, a test's or an embedding application's)."""
    _managers.add(manager)
    when_stopping(manager.serverapp, lambda: _managers.discard(manager))


def checkpointed(trigger: str, ok: bool, seconds: float | None = None, size: int | None = None) -> None:
    """A pause's checkpoint ended: committed (``ok``, with its seconds and bytes) or failed."""
    CHECKPOINTS.labels(str(trigger), "ok" if ok else "failed").inc()
    if ok and seconds is not None:
        CHECKPOINT_SECONDS.observe(seconds)
    if ok and size:
        CHECKPOINT_BYTES.observe(size)


def waited(seconds: float) -> None:
    """A resume had what it needed after waiting ``seconds`` for it."""
    RESUME_WAIT.observe(max(0.0, seconds))


def resumed(verdict: str | None) -> None:
    """A resume ended with ``verdict`` (None: it failed before one)."""
    RESUMES.labels(verdict or "failed").inc()


def released(state: str) -> None:
    RELEASES.labels(str(state)).inc()
