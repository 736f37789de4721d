"""The report's numbers: per session and in total, over a window, in GPU-hours, bytes and money.

A quantity the records cannot pin down is a ``Range`` (``low``..``high``; ``high`` None: no upper
bound), never a zero: a session whose start is before the first record held its GPUs *at least*
from its first evidence.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from . import intervals
from .intervals import Interval
from .timeline import Timeline

HOUR = 3600.0
#: A month of storage, for prices per GB-month: 30 days.
MONTH = 30 * 86400.0
GB = 1e9


@dataclass(frozen=True)
class Range:
    """A quantity known to lie in ``low..high`` (``high`` None: at least ``low``)."""

    low: float
    high: float | None

    @classmethod
    def exact(cls, value: float) -> Range:
        return cls(value, value)

    @property
    def known(self) -> bool:
        return self.high is not None and math.isclose(self.low, self.high, rel_tol=1e-9, abs_tol=1e-9)

    def __add__(self, other: Range) -> Range:
        high = None if self.high is None or other.high is None else self.high + other.high
        return Range(self.low + other.low, high)

    def minus(self, other: Range) -> Range:
        """This range less ``other`` (a part of it), never below zero."""
        low = 0.0 if other.high is None else max(0.0, self.low - other.high)
        return Range(low, None if self.high is None else self.high - other.low)

    def times(self, factor: float | None) -> Range:
        """This range times ``factor`` (None: an unknown factor, so 0 or more)."""
        if factor is None:
            return Range(0.0, None if self.high != 0 else 0.0)
        return Range(self.low * factor, None if self.high is None else self.high * factor)

    def to_json(self) -> float | dict[str, float | None]:
        return round(self.low, 6) if self.known else {"low": round(self.low, 6), "high": self.high}


ZERO = Range.exact(0.0)


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile by nearest rank (the smallest value with q% at or below it)."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def median(values: Iterable[float]) -> float | None:
    """The median (the mean of the two middle values for an even count), None for none."""
    values = list(values)
    return statistics.median(values) if values else None


@dataclass
class Window:
    """The report's window: ``[since, until)``; ``since`` None: from the first record."""

    since: float | None
    until: float

    def clip(self, spans: Iterable[Interval]) -> list[Interval]:
        return intervals.clip([(a, min(b, self.until)) for a, b in spans], self.since, self.until)

    def clip_array(self, spans: np.ndarray) -> np.ndarray:
        """``clip`` of an (n, 2) array, as an array."""
        return intervals.clip_array(spans, self.since, self.until)

    def has(self, at: float) -> bool:
        return (self.since is None or at >= self.since) and at < self.until


@dataclass
class SessionHours:
    """One row of the report: a session's kernel, or a server beyond what its kernels hold."""

    key: str
    kind: str
    user: str | None
    node: str | None
    gpu_model: str | None
    gpus: int | None
    held_hours: Range
    held: Range
    active: Range
    released: Range
    pauses: int
    resumes: int
    waits: list[float]
    unfinished_resumes: int
    snapshot_bytes: int | None
    written_bytes: int
    storage_gb_months: Range
    store_bytes: int | None = None
    #: Intervals inside the window, for the charts: held, active (their union), released.
    spans: dict[str, list[Interval]] = field(default_factory=dict)
    #: GPUs held at a moment (the session's count at its newest start before it).
    gpus_at: Callable[[float], int | None] | None = None
    #: Held intervals (in the window) when another session of the same server, started
    #: earlier, held the same GPUs: counted once, under that one, in the totals.
    shared: list[Interval] = field(default_factory=list)
    #: GPU-hours over ``shared``.
    shared_hours: Range = field(default_factory=lambda: ZERO)
    #: Times its kernel died and Jupyter restarted it.
    deaths: int = 0

    @property
    def median_wait(self) -> float | None:
        return median(self.waits)

    @property
    def p95_wait(self) -> float | None:
        return percentile(self.waits, 95)


def _hours(spans: list[Interval]) -> float:
    return intervals.length(spans) / HOUR


def _gpu_hours(t: Timeline, spans: list[Interval]) -> Range:
    """GPU-hours over ``spans`` at the GPUs held at each moment (an unknown count: 0 or more)."""
    seconds = t.gpu_seconds(intervals.union(spans))
    return Range(0.0, None) if seconds is None else Range.exact(seconds / HOUR)


def _busy_hours(t: Timeline, busy: np.ndarray) -> Range:
    """``_gpu_hours`` over busy spans already united (an array: a month of them is thousands)."""
    seconds = t.gpu_seconds(busy)
    return Range(0.0, None) if seconds is None else Range.exact(seconds / HOUR)


def _unknown_prefix(t: Timeline, window: Window) -> float | None:
    """Seconds before the first evidence the session may also have spent in its unknown state."""
    if t.unknown_before is None:
        return 0.0
    if window.since is None:
        return None
    return max(0.0, min(t.unknown_before, window.until) - window.since)


def _storage(t: Timeline, window: Window) -> Range:
    """GB-months held in the store: at least the newest checkpoint, at most all bytes written."""
    low = high = 0.0
    written = 0
    commits = [c for c in t.checkpoints if c[0] < window.until]
    for i, (at, wrote, total) in enumerate(commits):
        written += wrote if wrote is not None else (total or 0)
        end = commits[i + 1][0] if i + 1 < len(commits) else window.until
        start = at if window.since is None else max(at, window.since)
        seconds = max(0.0, end - start)
        low += (total if total is not None else 0) * seconds
        high += max(written, total or 0) * seconds
    return Range(low / GB / MONTH, high / GB / MONTH)


def session_hours(t: Timeline, window: Window, holes: list[Interval] | None = None) -> SessionHours:
    """The row of one timeline over ``window``; ``holes`` are intervals counted elsewhere (a
    server's kernels)."""
    held = window.clip(intervals.subtract(t.held, holes or []))
    paused = window.clip(intervals.subtract(t.paused, holes or []))
    busy = intervals.union_array(window.clip_array(intervals.as_array(t.active)))
    active = intervals.pairs(busy)
    prefix = _unknown_prefix(t, window)
    extra = Range(0.0, None if prefix is None else prefix / HOUR)
    held_hours = Range.exact(_hours(held)) + (extra if t.unknown_state == "held" else ZERO)
    first = t.gpus_at(t.unknown_before) if t.unknown_before is not None else t.gpus
    held_extra = extra.times(first) if t.unknown_state == "held" else ZERO
    maybe = window.clip(intervals.subtract(t.maybe_held, holes or []))
    if maybe:
        held_hours = held_hours + Range(0.0, _hours(maybe))
        held_extra = held_extra + Range(0.0, _gpu_hours(t, maybe).high)
    released_extra = extra.times(first) if t.unknown_state == "paused" else ZERO
    in_window = [w for w in t.waits if window.has(w[0])]
    return SessionHours(
        key=t.key,
        kind=t.kind,
        user=t.user,
        node=t.node,
        gpu_model=t.gpu_model,
        gpus=t.gpus,
        held_hours=held_hours,
        held=_gpu_hours(t, held) + held_extra,
        active=_busy_hours(t, busy),
        released=_gpu_hours(t, paused) + released_extra,
        pauses=sum(window.has(at) for at, _ in t.pauses),
        resumes=sum(window.has(at) for at in t.resumes),
        waits=[end - start for start, end in in_window],
        unfinished_resumes=sum(window.has(at) for at in t.unfinished_resumes),
        snapshot_bytes=t.snapshot_bytes,
        written_bytes=sum(w or 0 for at, w, _ in t.checkpoints if window.has(at)),
        storage_gb_months=_storage(t, window),
        spans={"held": held, "active": active, "released": paused},
        gpus_at=t.gpus_at,
        deaths=sum(window.has(at) for at in t.deaths),
    )


@dataclass
class Hours:
    """The whole report: its window, rows, totals, and what was skipped."""

    window: Window
    sessions: list[SessionHours]
    malformed: int = 0
    price: float | None = None
    storage_price: float | None = None

    def total(self, name: str) -> Range:
        """``name`` summed over the rows; GPUs held by two sessions of one server at once count once."""
        out = ZERO
        for s in self.sessions:
            out = out + getattr(s, name)
        return out.minus(self.shared) if name == "held" else out

    @property
    def shared(self) -> Range:
        """GPU-hours the rows count twice: sessions of one server running at once on its GPUs."""
        out = ZERO
        for s in self.sessions:
            out = out + s.shared_hours
        return out

    @property
    def waits(self) -> list[float]:
        return [w for s in self.sessions for w in s.waits]

    def money(self, name: str) -> Range | None:
        """``name`` (held, released, active) in money at the GPU-hour price; None without one."""
        return None if self.price is None else self.total(name).times(self.price)

    def storage_money(self) -> Range | None:
        if self.storage_price is None:
            return None
        return self.total("storage_gb_months").times(self.storage_price)

    def per_day(self, name: str) -> dict[int, float]:
        """GPU-hours of ``name`` (held, active, released) on each UTC day of the window."""
        days: dict[int, float] = {}
        for s in self.sessions:
            for day, seconds in intervals.per_day(s.spans[name], s.gpus_at).items():
                days[day] = days.get(day, 0.0) + seconds / HOUR
            if name == "held":
                for day, seconds in intervals.per_day(s.shared, s.gpus_at).items():
                    days[day] -= seconds / HOUR
        return days


def compute(
    timelines: list[Timeline],
    window: Window,
    *,
    malformed: int = 0,
    price: float | None = None,
    storage_price: float | None = None,
) -> Hours:
    """The report over ``window``: one row per session, then one per server for the time it held
    (or released) GPUs that none of its kernels accounts for."""
    kernels = [t for t in timelines if t.kind == "kernel"]
    rows = [session_hours(t, window) for t in kernels]
    _mark_shared(kernels, rows)
    for t in timelines:
        if t.kind != "server":
            continue
        mine = [k for k in kernels if k.server == t.server and k.user == t.user]
        holes = [i for k in mine for i in k.held + k.paused]
        row = session_hours(t, window, holes)
        if row.held_hours.high != 0 or row.released.high != 0:
            rows.append(row)
    rows = [r for r in rows if _touches(r, window)]
    return Hours(window, rows, malformed, price, storage_price)


def _mark_shared(kernels: list[Timeline], rows: list[SessionHours]) -> None:
    """Two notebooks' kernels on one server use the same GPUs (a server's GPUs are all its
    kernels'): where their held times overlap, the one started first counts the GPUs and the
    later ones' overlap is ``shared``. Kernels outside a server are never merged: nothing says
    which GPUs each could see."""
    groups: dict[tuple[str | None, str], list[tuple[Timeline, SessionHours]]] = {}
    for t, row in zip(kernels, rows, strict=True):
        if t.server is not None and t.held:
            groups.setdefault((t.node, t.server), []).append((t, row))
    for members in groups.values():
        members.sort(key=lambda m: (min(a for a, _ in m[0].held), m[0].key))
        counted: list[Interval] = []
        for t, row in members:
            held = row.spans["held"]
            row.shared = intervals.intersect(held, counted)
            row.shared_hours = _gpu_hours(t, row.shared) if row.shared else ZERO
            counted = intervals.union(counted + held)


def _touches(row: SessionHours, window: Window) -> bool:
    return bool(row.spans["held"] or row.spans["released"] or row.spans["active"] or row.pauses or row.waits) or (
        row.held_hours.high != 0
    )
