"""Closed-open time intervals ``(start, end)`` in epoch seconds: union, clip, subtract, intersect,
length."""

from __future__ import annotations

from collections.abc import Callable, Iterable

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The intervals merged where they overlap or touch, sorted; empty ones dropped."""
    merged: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def clip(intervals: Iterable[Interval], start: float | None, end: float | None) -> list[Interval]:
    """The parts of ``intervals`` inside ``[start, end)`` (None: unbounded on that side)."""
    lo = float("-inf") if start is None else start
    hi = float("inf") if end is None else end
    return [(max(a, lo), min(b, hi)) for a, b in intervals if min(b, hi) > max(a, lo)]


def subtract(intervals: Iterable[Interval], holes: Iterable[Interval]) -> list[Interval]:
    """The parts of ``intervals`` not covered by ``holes``."""
    out: list[Interval] = []
    gaps = union(holes)
    for start, end in union(intervals):
        cursor = start
        for a, b in gaps:
            if b <= cursor or a >= end:
                continue
            if a > cursor:
                out.append((cursor, a))
            cursor = max(cursor, b)
        if cursor < end:
            out.append((cursor, end))
    return out


def intersect(intervals: Iterable[Interval], others: Iterable[Interval]) -> list[Interval]:
    """The parts of ``intervals`` that ``others`` also cover."""
    mine = union(intervals)
    return subtract(mine, subtract(mine, others))


def length(intervals: Iterable[Interval]) -> float:
    """Seconds covered by the intervals (overlaps counted once)."""
    return sum(b - a for a, b in union(intervals))


def per_day(intervals: Iterable[Interval], weight: Callable[[float], float | None] | None = None) -> dict[int, float]:
    """Seconds covered on each UTC day, keyed by the day's first epoch second; with ``weight``,
    each interval's seconds times ``weight(its start)`` (None counts as 0)."""
    days: dict[int, float] = {}
    for start, end in union(intervals):
        factor = 1.0 if weight is None else (weight(start) or 0)
        cursor = start
        while cursor < end:
            day = int(cursor // 86400) * 86400
            stop = min(end, day + 86400)
            days[day] = days.get(day, 0.0) + (stop - cursor) * factor
            cursor = stop
    return days
