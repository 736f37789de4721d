"""Loops with safe points: ``steps(iterable)`` yields the items, and the moment between two items
is a safe point where a checkpoint sees a consistent namespace. Where the loops are, for a
checkpoint and after a resume, is kept by ``positions``; how an iterable is continued, by
``resumable``.

Other parts of jupyter-pause act at safe points through the registry in ``points``
(``on_safe_point``, ``remove``); ``safepoints`` is the one every loop installs. A safe point where
nothing is due costs about a tenth of a microsecond, plus about 0.7 us when any callback is
registered.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from types import FrameType
from typing import Any

from .. import units
from ..errors import PauseError
from ..session import activity
from . import identity, inloop, matching, positions, resumable, safepoints
from .points import SafePoint, callbacks, on_safe_point, remove
from .positions import Loop

__all__ = ["SafePoint", "Steps", "on_safe_point", "remove", "steps"]


def _announce(loop: Loop) -> bool:
    """Call the registered callbacks at ``loop``'s safe point; True if one took a checkpoint."""
    before = activity.current.checkpoint
    point = SafePoint(loop.identity, loop.yielded, f"step {loop.yielded}{loop.suffix}", loop.depth)
    for callback in tuple(callbacks):
        callback(point)
    return activity.current.checkpoint != before


# --- every ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Every:
    """How often a loop checkpoints: every ``items`` items, or every ``seconds``."""

    items: int | None = None
    seconds: float | None = None


@dataclass
class Clock:
    """A loop's periodic schedule, kept across its passes (an inner loop starts a pass per epoch)."""

    count: int = 0
    last: float = field(default_factory=time.monotonic)

    def tick(self, every: Every) -> bool:
        """One more item done; True when a checkpoint is due."""
        self.count += 1
        if every.items is not None:
            return self.count % every.items == 0
        return time.monotonic() - self.last >= every.seconds  # type: ignore[operator]


#: Periodic schedules by loop identity.
_clocks: dict[str, Clock] = {}


def parse_every(every: int | str | timedelta | None) -> Every | None:
    """``every=N`` (items), ``"90s"``, ``"10m"``, ``"1.5h"`` or a ``timedelta``; ``None``: never."""
    if every is None:
        return None
    if isinstance(every, timedelta):
        seconds = every.total_seconds()
        if seconds <= 0:
            raise PauseError(f"steps(every=...) needs a positive duration, not {every}")
        return Every(seconds=seconds)
    if isinstance(every, int) and not isinstance(every, bool):
        if every <= 0:
            raise PauseError(f"steps(every={every}) needs a positive number of items")
        return Every(items=every)
    try:
        seconds = units.seconds(every, bare=None) if isinstance(every, str) else 0.0
    except ValueError:
        seconds = 0.0
    if seconds <= 0:
        raise PauseError(
            f"steps(every={every!r}): give a number of items (every=100) or a positive duration with "
            "its unit: '90s', '10m', '1.5h'"
        )
    return Every(seconds=seconds)


# --- steps ------------------------------------------------------------------------------------


class Steps:
    """An iterable whose passes have safe points between items (see ``steps``)."""

    def __init__(self, iterable: Iterable[Any], *, name: str | None, every: Any, frame: FrameType) -> None:
        if not hasattr(type(iterable), "__iter__") and not hasattr(type(iterable), "__getitem__"):
            raise PauseError(
                f"steps() needs something to loop over (a range, a list, a DataLoader...), not "
                f"{type(iterable).__name__} {_short(iterable)}"
            )
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise PauseError(f"steps(name=...) must be a non-empty string, not {name!r}")
        self.iterable = iterable
        self.every = parse_every(every)
        depth = positions.enclosing(threading.get_ident())
        self.found = identity.find(frame, depth)  # what identifies it in its cell
        self.identity = name or self.found.identity
        self.label = name or self.found.label
        self.depth = depth

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        return self._run()

    def _run(self) -> Iterator[Any]:
        kind = resumable.kind_of(self.iterable)
        loop = Loop(self.identity, self.label, self.depth, self.iterable, kind, _length(self.iterable))
        loop.frame, loop.thread = sys._getframe(1), threading.get_ident()
        loop.origin = self.found.record()
        iterator = loop.iterator = self._begin(loop)
        clock = _clocks.setdefault(self.identity, Clock())
        positions.enter(loop)
        try:
            while True:
                if kind.name == "stateful":
                    loop.before = self.iterable.state_dict()  # type: ignore[attr-defined]
                try:
                    item = next(iterator)
                except StopIteration:
                    positions.finish(loop)
                    return
                loop.yielded += 1
                loop.between = False
                yield item
                loop.between = True
                taken = bool(callbacks) and _announce(loop)  # a checkpoint taken here makes ours not due
                if inloop.pending is not None:
                    inloop.report()  # a background periodic checkpoint that failed is said here
                if self.every is not None and clock.tick(self.every) and not taken:
                    _periodic(loop, clock)
        finally:
            loop.iterator = None
            positions.leave(loop)

    def _begin(self, loop: Loop) -> Iterator[Any]:
        """Start the pass: from the beginning, or where an armed position says."""
        position = matching.take(self.found, self.identity, self.label, self.depth)
        if position is not None and position.kind != loop.kind.name:
            print(
                f"jupyter-pause: loop {self.label!r} looped over a {position.kind} when checkpointed and over a "
                f"{loop.kind.name} now; it starts from its first item",
                file=sys.stderr,
            )
            position = None
        if position is None:
            iterator, loop.created = resumable.start(self.iterable, loop.kind)
            return iterator
        loop.yielded = position.done
        if position.finished:
            print(f"jupyter-pause: loop {self.label!r} had finished when the checkpoint was taken; it is skipped")
            return iter(())
        if position.length is not None and loop.length is not None and position.length != loop.length:
            print(
                f"jupyter-pause: loop {self.label!r} had {position.length} items when checkpointed and has "
                f"{loop.length} now; continuing after item {position.done} all the same",
                file=sys.stderr,
            )
        iterator, loop.created = resumable.resume(self.iterable, loop.kind, position.done, position.state)
        if position.done == 0:  # a loader's next pass, from the state its last one ended in
            return iterator
        print(
            f"jupyter-pause: loop {self.label!r} continues where the checkpoint left it: {position.done} "
            f"of {loop.length if loop.length is not None else '?'} items done"
        )
        return iterator


def steps(iterable: Iterable[Any], *, name: str | None = None, every: int | str | timedelta | None = None) -> Steps:
    """Loop over ``iterable`` with a safe point between items; the position is checkpointed.

    ::

        for epoch in jp.steps(range(10)):
            for x, y in jp.steps(loader, every="10m"):
                ...

    Parameters
    ----------
    iterable
        What to loop over. Ranges, sequences, mappings and ``torch.utils.data.DataLoader``
        (shuffled too) continue exactly after a resume; so does a loader with
        ``state_dict``/``load_state_dict`` (torchdata's ``StatefulDataLoader``). Other
        iterators continue by drawing the items already done again, and checkpoints say so.
    name
        The loop's identity; by default one is derived from the cell's ``steps`` calls (their
        order, nesting, names and iterables' source: see ``identity``) and the nesting depth, so
        the same cell in a new kernel finds its position, edited outside those calls too. A named
        loop keeps its place when its own call or the cell's other loops change.
    every
        Also checkpoint (trigger ``periodic``) at a safe point every N items (an int) or every
        so long (``"90s"``, ``"10m"``, ``"1h"``, a ``timedelta``). The loop waits only while the
        state is copied; the checkpoint is written and committed in the background, and a
        failure is reported at the next safe point or the end of the cell (see ``inloop``).

    Returns
    -------
    Steps
        An iterable; each pass over it is one run of the loop. After a resume, the first pass
        of a loop whose identity matches a checkpointed one continues after its last completed
        item; an enclosing loop gives its current item again.
    """
    safepoints.install()  # pause requests and SIGTERM act at the safe points of every loop
    _forget_after_each_cell()
    return Steps(iterable, name=name, every=every, frame=sys._getframe(1))


_hooked = False


def _forget_after_each_cell() -> None:
    """In IPython, let go of the ended loops (and the frames they hold) when each cell ends,
    rather than at the next ``steps`` call: a function's locals are not kept alive."""
    global _hooked
    shell = _shell()
    if _hooked or shell is None:
        return
    _hooked = True
    shell.events.register("pre_run_cell", lambda info=None: positions.new_cell())
    shell.events.register("post_run_cell", lambda result=None: positions.forget_ended(threading.get_ident()))


def _shell() -> Any:
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _length(iterable: Any) -> int | None:
    try:
        return len(iterable)
    except Exception:  # no length, or one that cannot be taken: the position still holds
        return None


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # an object whose repr raises is still named by its type
        return ""
    return f"({text[:40]}...)" if len(text) > 40 else f"({text})"


def _periodic(loop: Loop, clock: Clock) -> None:
    """A periodic checkpoint at ``loop``'s safe point: the loop waits while the state is copied,
    the write goes on in the background (``inloop``)."""
    inloop.take(positions.describe(loop), _config())
    clock.last = time.monotonic()


def _config() -> Any:
    """The kernel's configuration (IPython's config applies), or the defaults outside IPython."""
    from ..config import PauseConfig

    shell = _shell()
    return PauseConfig(parent=shell) if shell is not None else PauseConfig()
