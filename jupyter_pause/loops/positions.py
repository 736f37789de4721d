"""Where the ``steps`` loops of this process are: the loops running now (and those that ended
inside what still runs) as a checkpoint records them, and the positions a resume armed for the
loops to come.

A loop runs in a frame; it is running while that frame is on its thread's stack. A loop left by
``break`` or an exception is not told, so loops whose frame has stopped are forgotten whenever
the stack is looked at.

An armed position is part of the session's state until its loop takes it: a pause that stops a
cell at a safe point arms the loops' positions in this process (``hold``), as a resume does, so a
checkpoint taken before the cell runs again (on SIGTERM, periodic, manual, a release) still holds
where the loops were, and the cell run again continues there.
"""

from __future__ import annotations

import pickle
import sys
import threading
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from ..serialize import moved
from ..session.running import Positions, armed_notes
from . import resumable


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
    iterator: Any = None  # what the pass draws from (a DataLoader's iterator holds its worker processes)
    origin: dict[str, Any] = field(default_factory=dict)  # what identifies it in its cell (``loops.identity``)

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


def forget_ended(thread: int) -> list[Loop]:
    """Forget ``thread``'s loops whose frame has stopped running (a loop left by ``break`` or an
    exception is not told); returns that thread's loops still running, outermost first."""
    live = _live_frames(thread)
    stale = [loop for loop in _running if loop.thread == thread and id(loop.frame) not in live]
    for loop in stale:
        _running.remove(loop)
        _left(loop)
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


def enclosing(thread: int) -> int:
    """How many loops enclose a loop starting now on ``thread``."""
    return len(forget_ended(thread))


def enter(loop: Loop) -> None:
    """``loop`` starts its pass (inside the loops running on its thread now)."""
    forget_ended(loop.thread)
    outer = [other for other in _running if other.thread == loop.thread and other.depth < loop.depth]
    loop.suffix = "".join(f" of {o.label} {o.done}" for o in reversed(outer))
    _running.append(loop)


def leave(loop: Loop) -> None:
    """``loop`` stops running (ended, broken out of, or raised in)."""
    if loop in _running:
        _running.remove(loop)
        _left(loop)


def finish(loop: Loop) -> None:
    """``loop``'s pass ended: a checkpoint taken before the code around it ends records it."""
    loop.finished, loop.between = True, True
    leave(loop)
    loop.marks = tuple((o, o.yielded) for o in _running if o.thread == loop.thread and o.depth < loop.depth)
    loop.before = loop.created = None
    _finished[loop.identity] = loop
    loop.carried = resumable.after_pass(loop.source, loop.kind)
    if loop.carried is not None:
        _carried[loop.identity] = loop


def describe(loop: Loop) -> str:
    """``"step 137 of epoch 3"``: items done in ``loop`` (between items) or its current item, then
    each enclosing loop's current item."""
    head = f"step {loop.done}" if loop.between else f"{loop.label} {loop.done}"
    return head + loop.suffix


def capture() -> Positions:
    """Where every running ``steps`` loop is, for a checkpoint taken now (and the loops that
    finished inside what is running: the same cell run again skips them)."""
    threads = {loop.thread for loop in [*_running, *_finished.values(), *_carried.values()]}
    running = [loop for thread in threads for loop in forget_ended(thread)]
    loops = sorted([*running, *_finished.values()], key=lambda loop: (loop.depth, not loop.finished))
    records, states, notes = [], {}, []
    for loop in _carried.values():
        if loop not in loops and loop.identity not in {other.identity for other in loops}:
            records.append(_record(loop, done=0, finished=False, description=f"before the next pass of {loop.label!r}"))
            states[loop.identity] = loop.carried
    for loop in loops:
        records.append(_record(loop, loop.done, loop.finished, describe(loop)))
        if loop.finished:
            continue
        saved = loop.created
        if loop.kind.name == "stateful":
            saved = resumable.state_now(loop.source, loop.kind) if loop.between else loop.before
        if saved is not None:
            states[loop.identity] = saved
        if not loop.kind.exact:
            records[-1]["reason"] = loop.kind.reason
            notes.append(f"loop {loop.label!r} ({describe(loop)}) may not continue exactly: {loop.kind.reason}")
            _warn_inexact(loop, notes[-1])
    if running:
        notes.append(f"loops at {describe(running[-1])}: run the cell again after a resume to continue there")
    held = _held(records, states)
    if held:
        notes.append(f"loops held at {held}, where a pause stopped their cell: run that cell again to continue there")
    notes += [why for identity, why in _interrupted.items() if identity not in {r["loop"] for r in records}]
    return Positions(records, pickle.dumps(states, protocol=5) if states else None, notes)


def _held(records: list[dict[str, Any]], states: dict[str, Any]) -> str:
    """Add the armed positions no running loop has taken yet to ``records`` and ``states``; the
    description of the innermost unfinished one ("" when none is held)."""
    recorded = {r["loop"] for r in records}
    innermost = ""
    for identity, armed in _armed.items():
        if identity in recorded or armed.record is None:
            continue
        records.append(dict(armed.record))
        if armed.state is not None:
            states[identity] = armed.state
        if not armed.finished:
            innermost = armed.description
    return innermost


#: Loops left in the middle of a pass (``break``, an exception, an interrupt), by identity: until
#: the loop runs again, a checkpoint says it holds no position for them.
_interrupted: dict[str, str] = {}


def _left(loop: Loop) -> None:
    if not loop.finished:
        _interrupted[loop.identity] = (
            f"loop {loop.label!r} was left at {describe(loop)} (by break, an exception or an interrupt), and "
            "this checkpoint holds no position for it: the cell run again starts it from its first item"
        )


def new_cell() -> None:
    """A cell starts: loops an earlier cell left mid-pass are that cell's story, not this one's."""
    _interrupted.clear()


def forget() -> None:
    """Forget every loop, position and note (what a new process starts with; a test helper)."""
    _running.clear()
    _finished.clear()
    _carried.clear()
    _armed.clear()
    _interrupted.clear()


def hold(taken: Positions) -> None:
    """Keep the positions a pause's checkpoint recorded (``taken``) as this process's own, armed
    for the cell run again, and part of every checkpoint until then (see the module's docstring)."""
    arm(taken.records, taken.state)


def release_workers() -> list[str]:
    """Stop the worker processes of the DataLoaders the running loops draw from, now (a paused
    cell will not come back to them, and a kernel shutting down would wait on them); the labels
    of the loops whose workers were stopped. A persistent loader starts new workers on its next pass."""
    stopped = []
    for loop in _running:
        if resumable.release_workers(loop.iterator, loop.source):
            stopped.append(loop.label)
    return stopped


#: Loops already told to be inexact (periodic checkpoints print no summary, so it is said once here).
_told_inexact: set[str] = set()


def _warn_inexact(loop: Loop, note: str) -> None:
    if loop.identity not in _told_inexact:
        _told_inexact.add(loop.identity)
        print(f"jupyter-pause: checkpointed {note}", file=sys.stderr)


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
        "at": description.removesuffix(loop.suffix),  # "step 32": this loop's part of the description
        **loop.origin,
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
    record: dict[str, Any] | None = None  # as the checkpoint recorded it: a checkpoint before the loop runs keeps it
    told: set[str] = field(default_factory=set)  # what the loops starting since said of it (``loops.matching``)


#: Positions a resume brought back, by loop identity; each is taken by its loop's first pass.
_armed: dict[str, Armed] = {}


def take_armed(identity: str) -> Armed | None:
    """The armed position of the loop ``identity``, taken by its first pass."""
    _interrupted.pop(identity, None)
    return _armed.pop(identity, None)


def waiting() -> list[Armed]:
    """The armed positions no loop has taken yet."""
    return list(_armed.values())


def unmatched(label: str) -> None:
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
    states = moved.loads(bytes(state)) if state else {}
    for r in records:
        _armed[r["loop"]] = Armed(
            r["kind"], r["done"], r.get("length"), r["description"], r.get("finished", False), states.get(r["loop"]), r
        )
    return armed_notes(records)
