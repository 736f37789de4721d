"""What of an object is its value: the state pickle saves of it, less what is no part of it.

A digest (``digests``) covers an object's state as pickle saves it, except entries that are
caches, counters or this process's own bookkeeping (``NOT_STATE``), class attributes made by
``type()``, ``abc`` or copyreg (``CLASS_SKIP``), and the class object a reconstructor carries
(its name is digested already).
"""

from __future__ import annotations

import sys
import types
from typing import Any

#: Class attributes that are not what the class defines: made by ``type()`` or ``abc`` itself,
#: or ``__slotnames__``, which copyreg caches on a class the first time one of its objects is
#: pickled (or digested), whichever variable that happens through.
CLASS_SKIP = frozenset({"__dict__", "__weakref__", "_abc_impl", "__module__", "__qualname__", "__slotnames__"})

#: State entries that are no part of the value, by class (subclasses too): matplotlib's callback
#: registry hands out the next callback id from its ``__getstate__`` (each pickle or digest of a
#: figure advances it); a transform's ``_parents`` are keyed by ``id()`` (the parents themselves
#: are in the figure), its ``_invalid`` and an artist's ``_stale`` say whether a
#: cache is up to date or a redraw is due (a restored figure is due one); a figure's
#: ``_number`` is the one pyplot gave it in this process.
NOT_STATE = {
    "matplotlib.cbook.CallbackRegistry": frozenset({"_cid_gen"}),
    "matplotlib.transforms.TransformNode": frozenset({"_invalid", "_parents"}),
    "matplotlib.artist.Artist": frozenset({"_stale"}),
    "matplotlib.figure.Figure": frozenset({"_number"}),
    # a persistent_workers loader's iterator: this process's worker processes, never saved
    "torch.utils.data.dataloader.DataLoader": frozenset({"_iterator"}),
    # a dask task's token, repr and whether its function is a coroutine: worked out on first use
    # (hashing the task, printing it, running it), and pickled as they are by then
    "dask._task_spec.Task": frozenset({"_token", "_repr", "_is_coro"}),
    # an open FITS file's memory map: this process's mapping of the file, made again at the next read
    "astropy.io.fits.file._File": frozenset({"_mmap"}),
    # where a memory-mapped table's Arrow file lies on this node: a resume elsewhere maps a copy,
    # whose bytes are checked against the digest the checkpoint kept of them (``datafiles``)
    "datasets.table.MemoryMappedTable": frozenset({"path"}),
}

#: The libraries ``NOT_STATE`` names classes of: without one of them imported, nothing is skipped.
NOT_STATE_LIBRARIES = frozenset(name.partition(".")[0] for name in NOT_STATE)


def without_caches(state: dict[Any, Any], kind: type) -> dict[Any, Any]:
    """``state`` without the entries ``NOT_STATE`` names for ``kind`` or a class it derives from."""
    if not any(library in sys.modules for library in NOT_STATE_LIBRARIES):
        return state
    skip = set().union(*(NOT_STATE.get(f"{c.__module__}.{c.__qualname__}", ()) for c in kind.__mro__))
    return {k: v for k, v in state.items() if k not in skip} if skip else state


def attribute_names(obj: Any) -> frozenset[str]:
    """The names in the attribute dictionary of ``obj`` when its class reduces it in Python code
    (none for others: asking a ``functools.partial`` for its dictionary makes one, and it
    pickles differently from then on)."""
    kind = type(obj)
    if not any(isinstance(getattr(kind, m, None), types.FunctionType) for m in ("__reduce__", "__reduce_ex__")):
        return frozenset()
    try:
        attributes = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return frozenset()
    return frozenset(k for k in attributes if type(k) is str) if type(attributes) is dict else frozenset()


def named(part: Any) -> bool:
    """Whether ``part`` of a reduction is a non-empty dictionary keyed by strings."""
    return type(part) is dict and bool(part) and all(type(k) is str for k in part)


def cell_value(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return "<empty cell>"


def strip_class(args: Any) -> Any:
    """copyreg's reconstructor args carry the class itself; its name is digested already."""
    if isinstance(args, tuple):
        return tuple(f"class:{a.__module__}.{a.__qualname__}" if isinstance(a, type) else a for a in args)
    return args
