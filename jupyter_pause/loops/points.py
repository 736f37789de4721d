"""The safe points of ``steps`` loops as other parts see them: ``SafePoint`` and the registry of
callbacks called at each one.

    on_safe_point(callback)   # callback(point: SafePoint) at every safe point, on the loop's thread
    remove(callback)          # stop calling it

A callback may take a checkpoint or raise (a pause stops the cell that way); one that raises ends
the loop with that exception.
"""

from __future__ import annotations

import threading
from typing import Callable, NamedTuple


class SafePoint(NamedTuple):
    """A moment between two items of a running ``steps`` loop.

    Attributes
    ----------
    loop
        The loop's identity (its ``name``, or one derived from the cell's ``steps`` calls and the
        nesting depth: ``identity``): the same in a new kernel running the same cell.
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


#: Callbacks called at every safe point, in the order registered (changed only through
#: ``on_safe_point`` and ``remove``; ``steps`` reads it at every safe point).
callbacks: list[Callable[[SafePoint], object]] = []
_lock = threading.Lock()


def on_safe_point(callback: Callable[[SafePoint], object]) -> Callable[[SafePoint], object]:
    """Call ``callback(point)`` at every safe point of every ``steps`` loop, until ``remove``.

    Registering the same callback twice registers it once. Returns ``callback`` (usable as a
    decorator).
    """
    with _lock:
        if callback not in callbacks:
            callbacks.append(callback)
    return callback


def remove(callback: Callable[[SafePoint], object]) -> bool:
    """Stop calling ``callback`` at safe points; False when it was not registered."""
    with _lock:
        if callback in callbacks:
            callbacks.remove(callback)
            return True
    return False
