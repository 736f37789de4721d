"""List and dict subclasses whose own mutators need the object's attributes: attributes first, then items.

Pickle saves a list or dict subclass as its class, its items and its attributes, and loads them
in that order: an empty object (``__init__`` is not called), then the items through the
subclass's own ``extend``/``append`` or ``__setitem__``, then the attributes. A subclass whose
mutators read an attribute (bokeh's ``PropertyValueList`` notifies the owners it keeps in
``_owners``) then fails to load, or runs its side effects on half-built owners. For those
classes the checkpoint saves the same two parts in the other order, and puts the items back with
the base type's own methods: the object comes back with the items and attributes it had, and
nothing runs that did not run when they were saved.
"""

from __future__ import annotations

import copyreg
from typing import Any, Callable

#: The methods pickle calls to put items into a list or dict subclass, by base type.
_MUTATORS: dict[type, tuple[str, ...]] = {list: ("extend", "append"), dict: ("__setitem__",)}


def restore_container(obj: Any, saved: tuple[Any, Any]) -> Any:
    """Set ``obj``'s attributes as pickle's BUILD does, then its items with the base type's methods."""
    state, items = saved
    slots = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
    if state:
        obj.__dict__.update(state)
    for name, value in (slots or {}).items():
        setattr(obj, name, value)
    if isinstance(obj, list):
        list.extend(obj, items)
    else:
        dict.update(obj, items)
    return obj


def _needs_order(kind: type) -> type | None:
    """The base (list or dict) of a subclass pickle would fill through its own mutators before
    its attributes are set, else None (pickle's own order is right for it)."""
    if kind in copyreg.dispatch_table or getattr(kind, "__setstate__", None) is not None:
        return None
    if kind.__reduce_ex__ is not object.__reduce_ex__ or kind.__reduce__ is not object.__reduce__:
        return None
    for base, mutators in _MUTATORS.items():
        if kind is not base and issubclass(kind, base):
            if any(getattr(kind, m) is not getattr(base, m) for m in mutators):
                return base
    return None


def reduce_container(obj: Any) -> Any:
    """Pickle's own reduction of ``obj``, with its items moved after its attributes."""
    func, args, state, listitems, dictitems = (tuple(obj.__reduce_ex__(2)) + (None,) * 5)[:5]
    items: Any = list(listitems or ()) if isinstance(obj, list) else dict(dictitems or ())
    return (func, args, (state, items), None, None, restore_container)


def reducer_for(kind: type) -> Callable[[Any], Any] | None:
    """``reduce_container`` for a list or dict subclass that needs it, else None."""
    return reduce_container if _needs_order(kind) is not None else None
