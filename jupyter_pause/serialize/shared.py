"""Objects whose state their class keeps (Borg instances, singletons), saved as the class's state.

A Borg instance uses a dictionary its class (or a base class) holds as its ``__dict__``, so every
instance of the class shares one state: accelerate's ``PartialState``, ``AcceleratorState`` and
``GradientState`` do (``self.__dict__ = self._shared_state``). Pickle saves such an instance as
a copy of that dictionary and loads a detached object: after a resume, ``accelerator.state`` and
the state a prepared DataLoader holds no longer see each other's changes, and the class itself
holds nothing. Here the instance is saved as "an instance of the class's shared state": on load
it uses the class's dictionary again, filled with the saved entries, so every instance, those
made later included, shares it as before.

A singleton (a class attribute holding the class's one instance, ``cls._instance``) is saved the
same way: on load it is the instance the class holds in this process, with the saved state, and
the class holds it again.

When the new process's class already holds state (accelerate set up again before the resume, or
a restore into the kernel that took the checkpoint): the checkpoint wins. The class's dictionary
is updated with the saved entries, entries the checkpoint does not name stay, and instances made
here before the resume see the restored state; a singleton the class holds already is the one
restored into. Classes that say how they are pickled (their own ``__reduce__``) are left to it.
"""

from __future__ import annotations

import enum
import functools
import types
from typing import Any, Callable

from . import reducers

Reducer = Callable[[Any], Any]

#: Class attributes that never hold a shared dictionary, and are never asked for their value.
_NOT_STATE = (
    types.FunctionType,
    types.MemberDescriptorType,
    types.GetSetDescriptorType,
    property,
    classmethod,
    staticmethod,
    functools.cached_property,
)


def _class_dict(owner: type, name: str) -> dict[str, Any] | None:
    """The dictionary ``owner`` holds under ``name``, read through a descriptor (accelerate's
    thread-local one) when that is how the class holds it; None when it holds none there."""
    held = vars(owner).get(name)
    if type(held) is dict:
        return held
    if held is None or isinstance(held, _NOT_STATE) or not hasattr(type(held), "__set__"):
        return None
    try:
        found = getattr(owner, name)
    except Exception:  # a descriptor that cannot be read on its class holds no shared state
        return None
    return found if type(found) is dict else None


def _places(kind: type) -> tuple[list[tuple[type, str]], list[tuple[type, str]]]:
    """Where ``kind``'s classes may keep an instance's state: class attributes holding a
    dictionary, and class attributes holding an instance of that class."""
    dicts: list[tuple[type, str]] = []
    singles: list[tuple[type, str]] = []
    for owner in kind.__mro__[:-1]:
        for name, held in list(vars(owner).items()):
            if name.startswith("__") and name.endswith("__"):
                continue
            if isinstance(held, owner):
                singles.append((owner, name))
            elif _class_dict(owner, name) is not None:
                dicts.append((owner, name))
    return dicts, singles


def _own_reduction(kind: type) -> bool:
    return kind.__reduce_ex__ is not object.__reduce_ex__ or kind.__reduce__ is not object.__reduce__


def reducer_for(kind: type) -> Reducer | None:
    """A reducer for objects of exactly ``kind`` that may keep their state in their class, else None.

    The reducer saves an object whose ``__dict__`` is a class's dictionary, or which a class
    attribute holds, as the class's state; any other object of the kind as ``reducers`` does.
    """
    if issubclass(kind, (type, enum.Enum)) or not hasattr(kind, "__mro__") or _own_reduction(kind):
        return None
    if not kind.__dictoffset__:  # its objects have no ``__dict__`` of their own to share
        return None
    dicts, singles = _places(kind)
    if not dicts and not singles:
        return None
    return functools.partial(_reduce, dicts=dicts, singles=singles)


def _reduce(obj: Any, *, dicts: list[tuple[type, str]], singles: list[tuple[type, str]]) -> Any:
    try:
        own = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return reducers.reduce_by_value(obj)
    kind = type(obj)
    for owner, name in dicts:
        if _class_dict(owner, name) is own:
            return (attach, (kind, owner, name), own, None, None, fill)
    for owner, name in singles:
        if vars(owner).get(name) is obj:
            return (instance, (kind, owner, name), obj.__getstate__())
    return reducers.reduce_by_value(obj)


# -- loading -----------------------------------------------------------------------------------


def attach(kind: type, owner: type, name: str) -> Any:
    """A new instance of ``kind`` whose ``__dict__`` is the dictionary ``owner`` holds under
    ``name`` (made there when the class holds none yet: a notebook class still being rebuilt)."""
    shared = _class_dict(owner, name)
    if shared is None:
        shared = {}
        setattr(owner, name, shared)
    obj = kind.__new__(kind)
    obj.__dict__ = shared
    return obj


def fill(obj: Any, state: dict[str, Any]) -> Any:
    """Put the saved entries into the class's dictionary ``obj`` uses (the checkpoint's win)."""
    shared = obj.__dict__
    if state is not shared:
        shared.update(state)
    return obj


def instance(kind: type, owner: type, name: str) -> Any:
    """The instance of ``kind`` that ``owner`` holds under ``name`` in this process; a new one,
    put there, when it holds none (its state comes after, as pickle's BUILD sets it)."""
    held = vars(owner).get(name)
    if type(held) is kind:
        return held
    obj = kind.__new__(kind)
    setattr(owner, name, obj)
    return obj


#: What loading these calls acts on the process (a class's state), beyond the object it makes.
ACTS_ON_PROCESS = (attach, instance)
