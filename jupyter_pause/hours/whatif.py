"""What-if for the idle policy: replay the recorded activity against idle thresholds.

Assumptions (``ASSUMPTIONS`` prints them with every what-if):

- A session exists from its kernel's start to the stop that was not a pause (or the window's
  end); paused stretches count as existing, since the user meant to come back.
- The user arrives at the start of each activity span, or at the resume request when the span
  followed a recorded resume (the recorded wait is taken out of the user's timeline).
- With threshold T, the kernel pauses T after the last activity (or after it started) if no new
  activity arrived by then; a pause during activity never happens. The GPUs are released from the
  pause to the next arrival (or the session's end) and held again from the arrival on.
- On each arrival after such a pause the user waits the resume time for a checkpoint of that
  session's size: the session's own measured median wait, else ``a + b * bytes`` fitted to every
  measured resume (least squares), else the median of all measured waits; unknown without any.
- The user's later activity is not shifted by the wait; the GPU is held while they wait.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import intervals
from .timeline import Timeline
from .totals import HOUR, Hours, Window, median

ASSUMPTIONS = __doc__.split("Assumptions (``ASSUMPTIONS`` prints them with every what-if):\n\n", 1)[1].strip()


@dataclass
class WaitModel:
    """How long a user waits for a resume of a checkpoint of some size."""

    own: dict[str, float]
    a: float | None = None
    b: float | None = None
    fallback: float | None = None
    points: int = 0

    def wait(self, session: str, size: int | None) -> float | None:
        """Seconds a resume of ``session`` (newest checkpoint ``size`` bytes) would make its user wait."""
        if session in self.own:
            return self.own[session]
        if self.a is not None and self.b is not None and size is not None:
            return max(0.0, self.a + self.b * size)
        return self.fallback

    def describe(self) -> str:
        """The model in one line, with its fitted numbers."""
        parts = [f"a session's own median wait where it has one ({len(self.own)} session(s))"]
        if self.a is not None and self.b is not None:
            parts.append(f"else {self.a:.1f} s + {self.b * 1e9:.2f} s/GB x size (fit to {self.points} resume(s))")
        if self.fallback is not None:
            parts.append(f"else {self.fallback:.1f} s (median of all measured waits)")
        else:
            parts.append("else unknown (no resume was measured)")
        return "; ".join(parts)


def _size_at(t: Timeline, at: float, restored: int | None) -> int | None:
    if restored is not None:
        return restored
    sizes = [total for when, _, total in t.checkpoints if when <= at and total is not None]
    return sizes[-1] if sizes else t.snapshot_bytes


def fit(timelines: list[Timeline]) -> WaitModel:
    """The wait model from every measured resume (resume_requested -> next_cell_run)."""
    own, points, waits = {}, [], []
    for t in timelines:
        measured = [end - start for start, end in t.waits]
        if measured:
            own[t.key] = median(measured)
            waits += measured
        for (start, end), (_, restored) in zip(t.waits, t.restored, strict=False):
            size = _size_at(t, start, restored)
            if size is not None:
                points.append((float(size), end - start))
    model = WaitModel(own, fallback=median(waits), points=len(points))
    if len({x for x, _ in points}) >= 2:
        mx = sum(x for x, _ in points) / len(points)
        my = sum(y for _, y in points) / len(points)
        sxx = sum((x - mx) ** 2 for x, _ in points)
        model.b = sum((x - mx) * (y - my) for x, y in points) / sxx
        model.a = my - model.b * mx
    return model


@dataclass
class Outcome:
    """One policy over the window: GPU-hours held and released, pauses, and the users' waiting."""

    policy: str
    held: float
    released: float
    pauses: int
    resumes: int
    waiting: float | None
    unknown_waits: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "held_gpu_hours": round(self.held, 6),
            "released_gpu_hours": round(self.released, 6),
            "pauses": self.pauses,
            "resumes": self.resumes,
            "waiting_seconds": None if self.waiting is None else round(self.waiting, 3),
            "unknown_waits": self.unknown_waits,
        }


def _arrivals(t: Timeline, busy: np.ndarray, segment: tuple[float, float]) -> list[tuple[float, float]]:
    """(arrival, end) of each span of ``busy`` (``t``'s activity, united) in ``segment``, arrivals
    moved back to resume requests."""
    spans = intervals.clip_array(busy, *segment).tolist()
    requests = sorted(start for start, _ in t.waits)
    out = []
    for start, end in spans:
        while requests and requests[0] <= start:
            start = min(start, requests.pop(0))
        out.append((max(start, segment[0]), end))
    return out


def replay(t: Timeline, window: Window, threshold: float, model: WaitModel) -> Outcome:
    """One session's kernel under an idle threshold of ``threshold`` seconds."""
    exists = window.clip(intervals.union(t.held + t.paused))
    released: list[tuple[float, float]] = []
    pauses = resumes = unknown = 0
    waiting = 0.0
    wait = model.wait(t.key, t.snapshot_bytes)
    busy = intervals.union_array(intervals.as_array(t.active))
    for segment in exists:
        cursor = segment[0]
        for arrival, end in _arrivals(t, busy, segment):
            if arrival - cursor > threshold:
                released.append((cursor + threshold, arrival))
                pauses += 1
                resumes += 1
                if wait is None:
                    unknown += 1
                else:
                    waiting += wait
            cursor = max(cursor, end)
        if segment[1] - cursor > threshold:
            released.append((cursor + threshold, segment[1]))
            pauses += 1
    freed = (t.gpu_seconds(released) or 0.0) / HOUR
    held = (t.gpu_seconds(exists) or 0.0) / HOUR - freed
    return Outcome(f"idle {threshold:g} s", held, freed, pauses, resumes, waiting, unknown)


def _add(policy: str, outcomes: list[Outcome]) -> Outcome:
    known = [o.waiting for o in outcomes if o.waiting is not None]
    return Outcome(
        policy,
        sum(o.held for o in outcomes),
        sum(o.released for o in outcomes),
        sum(o.pauses for o in outcomes),
        sum(o.resumes for o in outcomes),
        sum(known),
        sum(o.unknown_waits for o in outcomes),
    )


def current(hours: Hours) -> Outcome:
    """What the recorded policy did, over the kernels (the rows the what-if replays)."""
    rows = [s for s in hours.sessions if s.kind == "kernel"]
    return Outcome(
        "current",
        sum(s.held.low for s in rows),
        sum(s.released.low for s in rows),
        sum(s.pauses for s in rows),
        sum(s.resumes for s in rows),
        sum(sum(s.waits) for s in rows),
        sum(s.unfinished_resumes for s in rows),
    )


def what_if(timelines: list[Timeline], hours: Hours, thresholds: dict[str, float]) -> tuple[WaitModel, list[Outcome]]:
    """The current policy, then one outcome per threshold (label: seconds), summed over sessions."""
    model = fit(timelines)
    kernels = [t for t in timelines if t.kind == "kernel" and t.key in {s.key for s in hours.sessions}]
    out = [current(hours)]
    for label, threshold in thresholds.items():
        out.append(_add(f"idle {label}", [replay(t, hours.window, threshold, model) for t in kernels]))
    return model, out
