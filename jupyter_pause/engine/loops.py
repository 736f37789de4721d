"""Loops with safe points: ``steps(iterable)`` yields the items, and the moment between two items
is a safe point where a checkpoint sees a consistent namespace.

Other parts of jupyter-pause act at safe points through a small registry:

    on_safe_point(callback)   # callback(point: SafePoint) at every safe point, on the loop's thread
    remove(callback)          # stop calling it

A callback may take a checkpoint or raise (a pause stops the cell that way); one that raises
ends the loop with that exception. A safe point where nothing is due costs about a tenth of a
microsecond, plus about 0.7 us when any callback is registered.
"""

from __future__ import annotations

import linecache
import os
import pickle
import re
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from types import FrameType
from typing import Any, Callable, NamedTuple

import xxhash

from ..errors import PauseError
from . import activity, resumable

__all__ = ["SafePoint", "Steps", "arm", "on_safe_point", "positions", "remove", "steps"]


class SafePoint(NamedTuple):
    """A moment between two items of a running ``steps`` loop.

    Attributes
    ----------
    loop
        The loop's identity (its ``name``, or one derived from the cell's source, the line of the
        ``steps`` call and the nesting depth): the same in a new kernel running the same cell.
    step
        Items of this loop completed so far.
    description
        For people: ``"step 137 of epoch 3"`` (the enclosing loops' current items).
    depth
        0 for an outermost loop, 1 for a loop inside it, and so on.
    """

    loop: str
    step: int
    description: str
    depth: int = 0


#: Callbacks called at every safe point, in the order registered.
_callbacks: list[Callable[[SafePoint], object]] = []
_callbacks_lock = threading.Lock()


def on_safe_point(callback: Callable[[SafePoint], object]) -> Callable[[SafePoint], object]:
    """Call ``callback(point)`` at every safe point of every ``steps`` loop, until ``remove``.

    Registering the same callback twice registers it once. Returns ``callback`` (usable as a
    decorator).
    """
    with _callbacks_lock:
        if callback not in _callbacks:
            _callbacks.append(callback)
    return callback


def remove(callback: Callable[[SafePoint], object]) -> bool:
    """Stop calling ``callback`` at safe points; False when it was not registered."""
    with _callbacks_lock:
        if callback in _callbacks:
            _callbacks.remove(callback)
            return True
    return False


def _announce(loop: Loop) -> bool:
    """Call the registered callbacks at ``loop``'s safe point; True if one took a checkpoint."""
    before = activity.current.checkpoint
    point = SafePoint(loop.identity, loop.yielded, f"step {loop.yielded}{loop.suffix}", loop.depth)
    for callback in tuple(_callbacks):
        callback(point)
    return activity.current.checkpoint != before


# --- the loops running now --------------------------------------------------------------------


@dataclass(eq=False)
class Loop:
    """One pass of a ``steps`` loop that is running."""

    identity: str
    label: str
    depth: int
    source: Any
    kind: resumable.Kind
    length: int | None
    frame: FrameType | None = None  # the frame the loop runs in: the loop is live while it runs
    thread: int = 0
    yielded: int = 0
    between: bool = False  # in ``__next__``, the body of the last item done, the next not fetched
    created: Any = None  # what continuing this pass needs (see ``resumable.start``)
    before: Any = None  # a stateful loader's state before its current item
    suffix: str = ""  # " of epoch 3": the enclosing loops' current items, fixed during this pass
    finished: bool = False
    marks: tuple[tuple[Loop, int], ...] = ()  # once finished: the enclosing loops and their items then
    carried: Any = None  # once finished: what the loader's next pass starts from (``resumable.after_pass``)

    @property
    def done(self) -> int:
        """Items completed: the current item is done only between items."""
        return self.yielded if self.between else max(self.yielded - 1, 0)


#: Loops running now, outermost first (on any thread; each thread's are in order).
_running: list[Loop] = []

#: Loops whose pass ended while the code around them still runs (the cell, the enclosing item):
#: a checkpoint records them too, so the same cell run again does not do them twice.
_finished: dict[str, Loop] = {}

#: Finished passes over loaders whose next pass depends on the last one's end state.
_carried: dict[str, Loop] = {}


def _live_frames(thread: int) -> set[int]:
    """Ids of the frames on ``thread``'s stack now."""
    frame = sys._getframe(1) if thread == threading.get_ident() else sys._current_frames().get(thread)
    ids = set()
    while frame is not None:
        ids.add(id(frame))
        frame = frame.f_back
    return ids


def _prune(thread: int) -> list[Loop]:
    """Forget ``thread``'s loops whose frame has stopped running (a loop left by ``break`` or an
    exception is not told); returns that thread's loops still running, outermost first."""
    live = _live_frames(thread)
    stale = [loop for loop in _running if loop.thread == thread and id(loop.frame) not in live]
    for loop in stale:
        _running.remove(loop)
    for identity, loop in list(_finished.items()):
        if loop.thread == thread and (id(loop.frame) not in live or not _still_inside(loop)):
            del _finished[identity]
    for identity, loop in list(_carried.items()):
        if loop.thread == thread and id(loop.frame) not in live:
            del _carried[identity]
    return [loop for loop in _running if loop.thread == thread]


def _still_inside(loop: Loop) -> bool:
    """A finished loop's enclosing loops are all still on the item during which it ran."""
    return all(outer in _running and outer.yielded == items and not outer.between for outer, items in loop.marks)


def _finish(loop: Loop) -> None:
    loop.finished, loop.between = True, True
    loop.marks = tuple((o, o.yielded) for o in _running if o.thread == loop.thread and o.depth < loop.depth)
    loop.before = loop.created = None
    _finished[loop.identity] = loop
    loop.carried = resumable.after_pass(loop.source, loop.kind)
    if loop.carried is not None:
        _carried[loop.identity] = loop


def _description(loop: Loop) -> str:
    """``"step 137 of epoch 3"``: items done in ``loop`` (between items) or its current item, then
    each enclosing loop's current item."""
    head = f"step {loop.done}" if loop.between else f"{loop.label} {loop.done}"
    return head + loop.suffix


def _suffix(loop: Loop) -> str:
    outer = [other for other in _running if other.thread == loop.thread and other.depth < loop.depth]
    return "".join(f" of {o.label} {o.done}" for o in reversed(outer))


# --- identity ---------------------------------------------------------------------------------

_FOR_TARGET = re.compile(r"\bfor\s+([A-Za-z_]\w*)\s+in\b")


def _identity(frame: FrameType, depth: int) -> tuple[str, str]:
    """A loop's identity and label, the same for the same cell in any kernel.

    IPython keeps a cell's source in ``linecache`` under its code's file name; the identity
    hashes that text (not the name, which holds a process id), with the line of the ``steps``
    call and the nesting depth. The label is the loop variable when it is one name.
    """
    filename, line = frame.f_code.co_filename, frame.f_lineno
    lines = linecache.getlines(filename)
    basis = "".join(lines) if lines else os.path.basename(filename)
    cell = xxhash.xxh3_64_hexdigest(basis.encode("utf-8", "replace"))
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    target = _FOR_TARGET.search(text)
    return f"cell-{cell[:12]}:line-{line}:depth-{depth}", target.group(1) if target else "item"


# --- every ------------------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|sec|m|min|h)\s*$", re.IGNORECASE)
_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}


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
    match = _DURATION.match(every) if isinstance(every, str) else None
    if match is None or float(match.group(1)) <= 0:
        raise PauseError(
            f"steps(every={every!r}): give a number of items (every=100) or a positive duration with "
            "its unit: '90s', '10m', '1.5h'"
        )
    return Every(seconds=float(match.group(1)) * _SECONDS[match.group(2).lower()])


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
        depth = len(_prune(threading.get_ident()))
        identity, label = _identity(frame, depth)
        self.identity = name or identity
        self.label = name or label
        self.depth = depth

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        return self._run()

    def _run(self) -> Iterator[Any]:
        kind = resumable.kind_of(self.iterable)
        loop = Loop(self.identity, self.label, self.depth, self.iterable, kind, _length(self.iterable))
        loop.frame, loop.thread = sys._getframe(1), threading.get_ident()
        iterator = self._begin(loop)
        clock = _clocks.setdefault(self.identity, Clock())
        _prune(loop.thread)
        loop.suffix = _suffix(loop)
        _running.append(loop)
        try:
            while True:
                if kind.name == "stateful":
                    loop.before = self.iterable.state_dict()  # type: ignore[attr-defined]
                try:
                    item = next(iterator)
                except StopIteration:
                    _running.remove(loop)
                    _finish(loop)
                    return
                loop.yielded += 1
                loop.between = False
                yield item
                loop.between = True
                taken = bool(_callbacks) and _announce(loop)  # a checkpoint taken here makes ours not due
                if self.every is not None and clock.tick(self.every) and not taken:
                    _periodic(loop, clock)
        finally:
            if loop in _running:
                _running.remove(loop)

    def _begin(self, loop: Loop) -> Iterator[Any]:
        """Start the pass: from the beginning, or where an armed position says."""
        position = _armed.pop(self.identity, None)
        if position is not None and position.kind != loop.kind.name:
            print(
                f"jupyter-pause: loop {self.label!r} looped over a {position.kind} when checkpointed and over a "
                f"{loop.kind.name} now; it starts from its first item",
                file=sys.stderr,
            )
            position = None
        if position is None:
            _unmatched(self.label)
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
        The loop's identity; by default one is derived from the cell's source, the line of
        this call and the nesting depth, so the same cell in a new kernel finds its position.
    every
        Also checkpoint (trigger ``periodic``) at a safe point every N items (an int) or every
        so long (``"90s"``, ``"10m"``, ``"1h"``, a ``timedelta``).

    Returns
    -------
    Steps
        An iterable; each pass over it is one run of the loop. After a resume, the first pass
        of a loop whose identity matches a checkpointed one continues after its last completed
        item; an enclosing loop gives its current item again.
    """
    from . import safepoints  # pause requests and SIGTERM act at the safe points of every loop

    safepoints.install()
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
    shell.events.register("post_run_cell", lambda result=None: _prune(threading.get_ident()))


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
    """A periodic checkpoint at ``loop``'s safe point, through the normal incremental path."""
    from .checkpoint import checkpoint

    try:
        checkpoint(trigger="periodic", config=_config())
    except Exception as e:  # the training goes on; the previous checkpoint stays the newest
        what = str(e) if isinstance(e, PauseError) else f"{type(e).__name__}: {e}"
        print(
            f"jupyter-pause: periodic checkpoint at {_description(loop)} failed ({what}); the previous "
            "checkpoint stays the newest and the loop goes on",
            file=sys.stderr,
        )
    clock.last = time.monotonic()


def _config() -> Any:
    """The kernel's configuration (IPython's config applies), or the defaults outside IPython."""
    from ..config import PauseConfig

    shell = _shell()
    return PauseConfig(parent=shell) if shell is not None else PauseConfig()


# --- positions in a checkpoint ----------------------------------------------------------------


@dataclass
class Positions:
    """The running loops as a checkpoint records them."""

    records: list[dict[str, Any]]
    state: bytes | None
    notes: list[str]


def positions() -> Positions:
    """Where every running ``steps`` loop is, for a checkpoint taken now (and the loops that
    finished inside what is running: the same cell run again skips them)."""
    threads = {loop.thread for loop in [*_running, *_finished.values(), *_carried.values()]}
    running = [loop for thread in threads for loop in _prune(thread)]
    loops = sorted([*running, *_finished.values()], key=lambda loop: (loop.depth, not loop.finished))
    records, states, notes = [], {}, []
    for loop in _carried.values():
        if loop not in loops and loop.identity not in {other.identity for other in loops}:
            records.append(_record(loop, done=0, finished=False, description=f"before the next pass of {loop.label!r}"))
            states[loop.identity] = loop.carried
    for loop in loops:
        records.append(_record(loop, loop.done, loop.finished, _description(loop)))
        if loop.finished:
            continue
        saved = loop.created
        if loop.kind.name == "stateful":
            saved = resumable.state_now(loop.source, loop.kind) if loop.between else loop.before
        if saved is not None:
            states[loop.identity] = saved
        if not loop.kind.exact:
            records[-1]["reason"] = loop.kind.reason
            notes.append(f"loop {loop.label!r} ({_description(loop)}) may not continue exactly: {loop.kind.reason}")
    if running:
        notes.append(f"loops at {_description(running[-1])}: run the cell again after a resume to continue there")
    return Positions(records, pickle.dumps(states, protocol=5) if states else None, notes)


def _record(loop: Loop, done: int, finished: bool, description: str) -> dict[str, Any]:
    """A loop's position as the manifest keeps it."""
    return {
        "loop": loop.identity,
        "label": loop.label,
        "depth": loop.depth,
        "kind": loop.kind.name,
        "done": done,
        "length": loop.length,
        "exact": loop.kind.exact,
        "finished": finished,
        "description": description,
    }


@dataclass
class Armed:
    """A checkpointed position, waiting for the loop it belongs to."""

    kind: str
    done: int
    length: int | None
    description: str
    finished: bool = False
    state: Any = None


#: Positions a resume brought back, by loop identity; each is taken by its loop's first pass.
_armed: dict[str, Armed] = {}


def _unmatched(label: str) -> None:
    """Say once when a loop starts afresh while checkpointed positions wait: the cell was
    perhaps edited since (its identity changed), and a silent restart would go unnoticed."""
    global _told
    if not _armed or _told:
        return
    _told = True
    waiting = ", ".join(a.description for a in _armed.values() if not a.finished) or "finished loops"
    print(
        f"jupyter-pause: loop {label!r} matches no loop of the resumed checkpoint, so it starts from its "
        f"first item; the checkpoint's loops were at {waiting}. Run the cell the checkpoint was taken in; "
        "if it was edited since, give its loops names (jp.steps(..., name='epochs'))",
        file=sys.stderr,
    )


_told = False


def arm(records: list[dict[str, Any]], state: bytes | bytearray | None) -> list[str]:
    """Make the next pass of each checkpointed loop continue where it was; returns notes."""
    global _told
    _told = False
    _armed.clear()
    states = pickle.loads(bytes(state)) if state else {}
    for r in records:
        _armed[r["loop"]] = Armed(
            r["kind"], r["done"], r.get("length"), r["description"], r.get("finished", False), states.get(r["loop"])
        )
    running = [r for r in records if not r.get("finished")]
    if not running:
        return []
    return [f"loops were at {running[-1]['description']}: run that cell again to continue there"]
