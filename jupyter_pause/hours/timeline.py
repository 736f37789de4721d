"""Per session, what the ledger says happened: when its GPUs were held, busy and released.

The meanings follow the ledger contract: a kernel holds its GPUs from ``kernel_started`` (or
``kernel_ready`` after a resume) to ``kernel_stopped``; a stop after ``pause_requested`` (or with a
pause trigger) is a pause, and the GPUs count as released by it until the session's next start.
A single-user server holds its GPUs from ``server_started`` to ``server_stopped``; a stop with the
``release`` trigger is a release, counted until the server starts again. An interval still open at
the end of the records runs to ``inf`` (the report clips it to its window).

Where the records start mid-way (a stop with no start before it), the state before the first
evidence is unknown: ``unknown_before`` and ``unknown_state`` say so, and the report turns that
into a range instead of a zero.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from ..ledger.spans import Spans
from ..vocabulary import KERNEL_EVENTS, PAUSE_TRIGGERS, SERVER_EVENTS, LedgerEvent, Trigger
from . import intervals
from .intervals import Interval
from .records import Record

INF = float("inf")
#: Spans from which ``gpu_seconds`` adds up at once (an array's worth) rather than one by one.
MANY = 64


def _no_spans() -> np.ndarray:
    return np.empty((0, 2))


@dataclass
class Timeline:
    """What one session (a kernel) or one server did, as intervals and moments."""

    key: str
    kind: str = "kernel"
    user: str | None = None
    node: str | None = None
    server: str | None = None
    gpu_model: str | None = None
    gpus: int | None = None
    held: list[Interval] = field(default_factory=list)
    paused: list[Interval] = field(default_factory=list)
    #: Busy spans, as an (n, 2) array of ``[start, end]`` (a month of a busy kernel is thousands).
    active: np.ndarray = field(default_factory=_no_spans)
    #: Stretches it may or may not have held (a server started again with no stop recorded between).
    maybe_held: list[Interval] = field(default_factory=list)
    #: The first evidence of a session whose state before it is unknown ("held" or "paused").
    unknown_before: float | None = None
    unknown_state: str | None = None
    pauses: list[tuple[float, str | None]] = field(default_factory=list)
    #: resume_requested moments (a server's resume, or %resume in a running kernel).
    resumes: list[float] = field(default_factory=list)
    #: (resume_requested, next_cell_run) of each resume the user came back to work after.
    waits: list[tuple[float, float]] = field(default_factory=list)
    #: resume_requested moments with no next cell (yet).
    unfinished_resumes: list[float] = field(default_factory=list)
    #: (at, bytes written, bytes_total) of each committed checkpoint.
    checkpoints: list[tuple[float, int | None, int | None]] = field(default_factory=list)
    #: (resume_requested, bytes restored) of each resume with a measured wait, for the wait model.
    restored: list[tuple[float, int | None]] = field(default_factory=list)
    #: When its kernel died and Jupyter restarted it (an out-of-memory kill, say).
    deaths: list[float] = field(default_factory=list)
    #: (at, GPUs) of each start: a session resumed on another node may hold another number.
    counts: list[tuple[float, int | None]] = field(default_factory=list)

    def gpus_at(self, at: float) -> int | None:
        """GPUs the session held (or, paused, had held) at ``at``: those of the newest start."""
        count = self.counts[0][1] if self.counts else self.gpus
        for when, n in self.counts:
            if when > at:
                break
            count = n
        return count

    def gpu_seconds(self, spans: list[Interval]) -> float | None:
        """GPU-seconds over ``spans``, each stretch at the GPUs of its start; None if a count is unknown.

        With the count changes in time order (as the records give them) each span finds its own
        by bisection, not by a scan of them all: a month of a busy kernel is thousands of spans.
        Over ``MANY`` spans or more they are added up at once (``_gpu_seconds_many``).
        """
        changes = [when for when, _ in self.counts]
        if any(b < a for a, b in zip(changes, changes[1:], strict=False)):
            return self._gpu_seconds_scan(intervals.pairs(intervals.as_array(spans)), changes)
        if len(spans) >= MANY:
            return self._gpu_seconds_many(intervals.as_array(spans), changes)
        if isinstance(spans, np.ndarray):
            spans = intervals.pairs(spans)
        total = 0.0
        for start, end in spans:
            inside = changes[bisect.bisect_right(changes, start) : bisect.bisect_left(changes, end)]
            cuts = [start, *(c for c in inside if start < c < end), end]
            for a, b in zip(cuts, cuts[1:], strict=False):
                at = bisect.bisect_right(changes, a) - 1
                count = self.counts[max(at, 0)][1] if self.counts else self.gpus
                if count is None:
                    return None
                total += (b - a) * count
        return total

    def _gpu_seconds_many(self, spans: np.ndarray, changes: list[float]) -> float | None:
        """``gpu_seconds`` of an (n, 2) array, count changes in time order: each span's seconds
        times its count, the same products as one by one, summed exactly (``math.fsum``, so in any
        order); the few spans a count change falls inside are cut as one by one."""
        if not len(spans):
            return 0.0
        seconds = spans[:, 1] - spans[:, 0]
        if not self.counts:
            return None if self.gpus is None else math.fsum((seconds * self.gpus).tolist())
        at = np.asarray(changes, dtype=np.float64)
        after = np.searchsorted(at, spans[:, 0], side="right")  # bisect_right(changes, start)
        before = np.searchsorted(at, spans[:, 1], side="left")  # bisect_left(changes, end)
        whole = before <= after  # no change strictly inside
        counts = [n for _, n in self.counts]
        which = np.maximum(after - 1, 0)[whole]
        if any(n is None for n in counts):
            known = np.array([n is not None for n in counts])
            if not known[which].all():
                return None
        values = np.array([0 if n is None else n for n in counts], dtype=np.float64)
        products = (seconds[whole] * values[which]).tolist()
        for start, end in spans[~whole].tolist():
            part = self.gpu_seconds([(start, end)])
            if part is None:
                return None
            products.append(part)
        return math.fsum(products)

    def _gpu_seconds_scan(self, spans: list[Interval], changes: list[float]) -> float | None:
        """``gpu_seconds`` for count changes out of time order: every change looked at for every span."""
        total = 0.0
        for start, end in spans:
            cuts = [start, *(c for c in changes if start < c < end), end]
            for a, b in zip(cuts, cuts[1:], strict=False):
                count = self.gpus_at(a)
                if count is None:
                    return None
                total += (b - a) * count
        return total

    @property
    def snapshot_bytes(self) -> int | None:
        """The size of the newest checkpoint (bytes_total), if any was recorded."""
        sizes = [total for _, _, total in self.checkpoints if total is not None]
        return sizes[-1] if sizes else None


class _Kernel:
    """The state machine of one session's kernel over its records."""

    def __init__(self, timeline: Timeline) -> None:
        self.t = timeline
        self.state: str | None = None  # None (unknown yet), held, paused, stopped
        self.since = 0.0  # when the current state began
        self.first: float | None = None  # first evidence while the state is unknown
        self.pause_asked = False  # a pause_requested since the kernel started
        self.pause_trigger: str | None = None
        self.resume_at: float | None = None
        self.ready_bytes: int | None = None
        self.busy: list[tuple[float, float]] = []  # activity spans, and packed ones (arrays)
        self.packed: list[np.ndarray] = []

    def evidence(self, at: float) -> None:
        if self.state is None:
            self.first = at if self.first is None else min(self.first, at)

    def start(self, r: Record) -> None:
        if self.state == "held":
            return
        if self.state == "paused":
            self.t.paused.append((self.since, r.at))
        elif self.state is None and self.first is not None and self.first < r.at:
            # evidence of a live kernel before its start: held at least since then, unknown before
            self.t.held.append((self.first, r.at))
            self.t.unknown_before, self.t.unknown_state = self.first, "held"
        self.state, self.since, self.pause_asked = "held", r.at, False
        self.t.counts.append((r.at, r.gpus))

    def stop(self, r: Record) -> None:
        if self.state in ("paused", "stopped"):
            return
        if self.state == "held":
            self.t.held.append((self.since, r.at))
        else:
            first = r.at if self.first is None else self.first
            self.t.held.append((first, r.at))
            self.t.unknown_before, self.t.unknown_state = first, "held"
            self.t.counts.append((first, r.gpus))
        if self.pause_asked or r.trigger in PAUSE_TRIGGERS:
            self.t.pauses.append((r.at, r.trigger or self.pause_trigger))
            self.state, self.since = "paused", r.at
        else:
            self.state = "stopped"
        self.pause_asked = False

    def feed(self, r: Record) -> None:
        t = self.t
        if r.event in (LedgerEvent.KERNEL_STARTED, LedgerEvent.KERNEL_READY):
            if r.event == LedgerEvent.KERNEL_READY:
                self.ready_bytes = r.bytes
            self.start(r)
        elif r.event == LedgerEvent.KERNEL_STOPPED:
            self.evidence(r.at)
            self.stop(r)
        elif r.event == LedgerEvent.KERNEL_RESTARTED:
            self.evidence(r.at)  # the same kernel, its GPUs held through the restart
            if r.reason == "died":
                t.deaths.append(r.at)
        elif r.event == LedgerEvent.PAUSE_REQUESTED:
            self.evidence(r.at)
            self.pause_asked, self.pause_trigger = True, r.trigger
        elif r.event == LedgerEvent.ACTIVITY and len(r.spans):
            # evidence keeps the earliest start, so the earliest of a record's spans is all it needs
            if isinstance(r.spans, Spans):
                self.packed.append(r.spans.array)
                self.evidence(float(r.spans.array[:, 0].min()))
            else:
                self.busy.extend(r.spans)
                self.evidence(min(start for start, _ in r.spans))
        elif r.event == LedgerEvent.CHECKPOINT_COMMITTED:
            self.evidence(r.at)
            t.checkpoints.append((r.at, r.bytes, r.bytes_total))
        elif r.event == LedgerEvent.RESUME_REQUESTED:
            if self.state is None:
                # paused (or not yet there) before the records begin: released from an unknown time
                t.unknown_before, t.unknown_state = r.at, "paused"
                self.state, self.since = "paused", r.at
            if self.resume_at is not None:
                t.unfinished_resumes.append(self.resume_at)
            self.resume_at, self.ready_bytes = r.at, None
            t.resumes.append(r.at)
        elif r.event == LedgerEvent.NEXT_CELL_RUN and self.resume_at is not None:
            t.waits.append((self.resume_at, r.at))
            t.restored.append((self.resume_at, self.ready_bytes))
            self.resume_at = None

    def finish(self) -> None:
        self.t.active = intervals.as_array(self.busy, *self.packed)
        if self.state == "held":
            self.t.held.append((self.since, INF))
        elif self.state == "paused":
            self.t.paused.append((self.since, INF))
        elif self.state is None and self.first is not None:
            # a live kernel whose start is before the records: held from its first evidence on
            self.t.held.append((self.first, INF))
            self.t.unknown_before, self.t.unknown_state = self.first, "held"
        if self.resume_at is not None:
            self.t.unfinished_resumes.append(self.resume_at)


def _server(t: Timeline, records: list[Record]) -> None:
    state, since = None, 0.0
    for r in records:
        if r.event == LedgerEvent.SERVER_STARTED and state == "held" and r.at > since:
            # started again with no stop between (the Hub service was down when it stopped):
            # it held its GPUs for an unknown part of the time since its last start
            t.maybe_held.append((since, r.at))
            since = r.at
            t.counts.append((r.at, r.gpus))
        elif r.event == LedgerEvent.SERVER_STARTED and state != "held":
            if state == "paused":
                t.paused.append((since, r.at))
            state, since = "held", r.at
            t.counts.append((r.at, r.gpus))
        elif r.event == LedgerEvent.SERVER_STOPPED and state not in ("paused", "stopped"):
            if state is None:
                t.unknown_before, t.unknown_state = r.at, "held"
                t.counts.append((r.at, r.gpus))
            else:
                t.held.append((since, r.at))
            if r.trigger == Trigger.RELEASE:
                t.pauses.append((r.at, r.trigger))
                state, since = "paused", r.at
            else:
                state = "stopped"
    if state == "held":
        t.held.append((since, INF))
    elif state == "paused":
        t.paused.append((since, INF))


def _describe(t: Timeline, records: list[Record]) -> None:
    for r in records:  # the newest value of each wins
        t.user = r.user or t.user
        t.node = r.node or t.node
        t.server = r.server or t.server
        t.gpu_model = r.gpu_model or t.gpu_model
        t.gpus = r.gpus if r.gpus is not None else t.gpus


def server_key(user: str | None, server: str | None) -> str:
    """The name a server's row has in the report: ``server:`` and the Hub's label of it (``user``
    or ``user/name``), else its user."""
    return f"server:{server or user or '-'}"


def timelines(records: Iterable[Record]) -> list[Timeline]:
    """One timeline per session (kernel events) and per server (server events), by name."""
    groups: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        if r.event in SERVER_EVENTS:
            groups.setdefault(("server", server_key(r.user, r.server)), []).append(r)
        elif r.event in KERNEL_EVENTS and r.session:
            groups.setdefault(("kernel", r.session), []).append(r)
    out = []
    for (kind, key), group in sorted(groups.items()):
        group.sort(key=lambda r: r.at)
        t = Timeline(key=key, kind=kind)
        _describe(t, group)
        if kind == "server":
            _server(t, group)
        else:
            machine = _Kernel(t)
            for r in group:
                machine.feed(r)
            machine.finish()
        started = [n for _, n in t.counts if n is not None]
        t.gpus = started[-1] if started else t.gpus  # the newest start's: a kernel may see fewer
        out.append(t)
    return out
