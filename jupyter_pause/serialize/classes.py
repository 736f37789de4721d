"""Notebook classes by value: a skeleton the bases accept, then the class's own attributes.

A class is rebuilt in two steps (``make_class``, then ``set_class_state``), so instances and
methods that refer to the class itself, or classes that refer to each other, come back as one
object graph. The skeleton holds what base classes and metaclasses look at while a class is made
(``__slots__``, ``typing.Generic``'s ``__orig_bases__``); ``abc.ABCMeta``'s registry is made anew,
with the virtual subclasses registered again, and a pandas accessor is registered again. Enums and
type variables get their own forms.
"""

from __future__ import annotations

import abc
import enum
import sys
import types
import warnings
from typing import Any

#: Class dictionary entries rebuilt when the class is made: by ``type()`` itself, and the
#: registry ``abc.ABCMeta`` gives every class it makes (a C object pickle cannot save).
_CLASS_SKIP = frozenset({"__dict__", "__weakref__", "_abc_impl"})

#: Where a notebook ABC's registered virtual subclasses (``Shape.register(tuple)``) travel in its
#: state: ``_abc_impl`` holds them, and it is made anew.
_ABC_REGISTERED = "__jupyter_pause_abc_registered__"

#: Where a notebook class registered as a pandas accessor (``@register_dataframe_accessor("geo")``)
#: carries its registrations: pandas keeps them on its own classes, which are not saved.
_PANDAS_ACCESSORS = "__jupyter_pause_pandas_accessors__"


def make_class(metaclass: type, name: str, bases: tuple[type, ...], skeleton: dict[str, Any]) -> type:
    """A class skeleton: name, bases, metaclass, slots; methods come with its state."""
    return types.new_class(name, bases, {"metaclass": metaclass}, lambda ns: ns.update(skeleton))


def set_class_state(cls: type, state: dict[str, Any]) -> type:
    """Fill in a class skeleton's attributes (and register an ABC's virtual subclasses again)."""
    for key, value in state.items():
        if key == _ABC_REGISTERED:
            for subclass in value:
                cls.register(subclass)  # type: ignore[attr-defined]
        elif key == _PANDAS_ACCESSORS:
            _register_pandas_accessors(cls, value)
        elif key not in ("__doc__",) or value is not None:
            setattr(cls, key, value)
    return cls


def _abc_registered(cls: type) -> list[type]:
    """The live virtual subclasses registered with ``cls`` if it is an ABC (``ABC.register``)."""
    get_dump = getattr(abc, "_get_dump", None)  # the C implementation's; absent with _py_abc
    if not isinstance(cls, abc.ABCMeta) or get_dump is None:
        return []
    return [sub for sub in (ref() for ref in get_dump(cls)[0]) if sub is not None]


def _pandas_accessors(cls: type) -> list[tuple[str, str]]:
    """``(kind, name)`` of each pandas accessor ``cls`` is registered as (kind: dataframe, series, index)."""
    pandas = sys.modules.get("pandas")
    if pandas is None:
        return []
    found = []
    for kind, target in (("dataframe", pandas.DataFrame), ("series", pandas.Series), ("index", pandas.Index)):
        for name in sorted(getattr(target, "_accessors", ())):
            if getattr(vars(target).get(name), "_accessor", None) is cls:
                found.append((kind, name))
    return found


def _register_pandas_accessors(cls: type, registrations: list[tuple[str, str]]) -> None:
    """Register ``cls`` again as the pandas accessors it was (the restored class replaces any
    registration the notebook's cell made in this kernel, without pandas' warning about it)."""
    from pandas.api import extensions

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for kind, name in registrations:
            getattr(extensions, f"register_{kind}_accessor")(name)(cls)


def reduce_class(cls: type) -> tuple[Any, ...]:
    """Reduce a dynamic class to a skeleton (name, bases, slots) plus its attributes.

    The skeleton carries what the base classes look at while the class is made: ``__slots__``,
    and ``__orig_bases__`` (``typing.Generic`` refuses a subclass without it).
    """
    namespace = dict(vars(cls))
    slots = namespace.get("__slots__")
    skeleton: dict[str, Any] = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
    if "__orig_bases__" in namespace:
        skeleton["__orig_bases__"] = namespace.pop("__orig_bases__")
    registered = _abc_registered(cls)
    if registered:
        namespace[_ABC_REGISTERED] = registered
    accessors = _pandas_accessors(cls)
    if accessors:
        namespace[_PANDAS_ACCESSORS] = accessors
    if slots is not None:
        skeleton["__slots__"] = slots
        slot_names = [slots] if isinstance(slots, str) else list(slots)
        for slot in slot_names:
            namespace.pop(slot, None)
    for key in _CLASS_SKIP | set(skeleton) | {"__slots__"}:
        namespace.pop(key, None)
    args = (type(cls), cls.__name__, cls.__bases__, skeleton)
    return (make_class, args, namespace, None, None, set_class_state)


_ENUM_INTERNALS = frozenset(
    {"_generate_next_value_", "__new__", "_new_member_", "__module__", "__qualname__", "__doc__"}
)


def make_enum(
    metaclass: type, name: str, bases: tuple[type, ...], members: dict[str, Any], qualname: str, module: str
) -> type:
    """An Enum class with its members; methods come with its state."""
    classdict = metaclass.__prepare__(name, bases)  # type: ignore[attr-defined]
    for member, value in members.items():
        classdict[member] = value
    classdict["__module__"] = module
    classdict["__qualname__"] = qualname
    return metaclass.__new__(metaclass, name, bases, classdict)  # type: ignore[call-overload, no-any-return]


def reduce_enum(cls: type[enum.Enum]) -> tuple[Any, ...]:
    """Reduce a notebook Enum: members go into the skeleton (an Enum cannot gain them later)."""
    members = {name: member._value_ for name, member in cls.__members__.items()}
    methods = {
        key: value
        for key, value in vars(cls).items()
        if key not in members
        and key not in _ENUM_INTERNALS
        and not (key.startswith("_") and key.endswith("_") and not key.startswith("__"))
        and isinstance(value, (types.FunctionType, staticmethod, classmethod, property))
    }
    args = (type(cls), cls.__name__, cls.__bases__, members, cls.__qualname__, cls.__module__)
    return (make_enum, args, methods, None, None, set_class_state)


def make_typevar(kind: type, name: str, constraints: tuple[Any, ...], options: dict[str, Any]) -> Any:
    """A ``TypeVar`` or ``ParamSpec`` defined in the notebook."""
    return kind(name, *constraints, **options)


def reduce_typevar(var: Any) -> tuple[Any, ...] | Any:
    """A notebook ``TypeVar``/``ParamSpec`` by value (pickle would look it up in ``__main__``,
    where it is not yet restored); one from a library stays a reference to that library's."""
    if getattr(var, "__module__", None) != "__main__":
        return NotImplemented
    options = {"bound": var.__bound__, "covariant": var.__covariant__, "contravariant": var.__contravariant__}
    if getattr(var, "__infer_variance__", False):
        options["infer_variance"] = True
    constraints = getattr(var, "__constraints__", ())
    return (make_typevar, (type(var), var.__name__, constraints, options))
