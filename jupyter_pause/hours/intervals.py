"""Closed-open time intervals ``(start, end)`` in epoch seconds: union, clip, subtract, intersect,
length; and union and clip of many at once, as an (n, 2) array (a month's busy spans).

The array forms give exactly the intervals the list forms give (they only compare and pick
values, never compute new ones), so a report is the same whichever its records took.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

Interval = tuple[float, float]


def as_array(intervals: Iterable[Interval] | np.ndarray, *arrays: np.ndarray) -> np.ndarray:
    """``intervals`` (pairs, or an array) and any further (n, 2) arrays as one (n, 2) float64 array."""
    first = np.asarray(intervals if isinstance(intervals, np.ndarray) else list(intervals), dtype=np.float64)
    parts = [first.reshape(-1, 2), *arrays]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def union_array(intervals: np.ndarray) -> np.ndarray:
    """``union`` of an (n, 2) array, as an (m, 2) array: sorted, merged where they overlap or touch."""
    spans = intervals[intervals[:, 1] > intervals[:, 0]]
    if not len(spans):
        return np.empty((0, 2))
    spans = spans[np.lexsort((spans[:, 1], spans[:, 0]))]
    ends = np.maximum.accumulate(spans[:, 1])
    new = np.ones(len(spans), dtype=bool)
    new[1:] = spans[1:, 0] > ends[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(spans) - 1)
    return np.column_stack((spans[first, 0], ends[last]))


def clip_array(intervals: np.ndarray, start: float | None, end: float | None) -> np.ndarray:
    """``clip`` of an (n, 2) array, as an array."""
    lo = np.maximum(intervals[:, 0], -np.inf if start is None else start)
    hi = np.minimum(intervals[:, 1], np.inf if end is None else end)
    inside = hi > lo
    return np.column_stack((lo[inside], hi[inside]))


def pairs(intervals: np.ndarray) -> list[Interval]:
    """An (n, 2) array as a list of ``(start, end)`` tuples of floats."""
    return list(zip(intervals[:, 0].tolist(), intervals[:, 1].tolist(), strict=True))


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
