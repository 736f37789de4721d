"""By-value pickling of what only lives in the notebook: its functions, lambdas and classes.

Plain pickle stores a function or class by reference (module + name); one defined in ``__main__``
then fails to load in a new process. These reducers store it by value instead: a skeleton first
(memoised, so cycles and shared references survive) and its state after. Functions are rebuilt
with the restoring namespace as their globals, so after a resume they see the live notebook
variables, as if their cells had just been run.
"""

from __future__ import annotations

import builtins
import dataclasses
import enum
import functools
import importlib
import io
import marshal
import os
import sys
import types
import typing
from typing import Any, Callable

from . import modulepaths, parametrized

# make_class, make_enum and set_class_state stay importable here: checkpoints written before
# ``classes`` split off name them in this module.
from .classes import make_class, make_enum, reduce_class, reduce_enum, reduce_typevar, set_class_state  # noqa: F401

#: Marker for a closure cell that had no value yet.
_EMPTY_CELL = "__jupyter_pause_empty_cell__"

_MISSING = object()

#: ``Py_TPFLAGS_HEAPTYPE``: set on classes made by Python code, the only ones rebuilt by value.
_HEAPTYPE = 1 << 9


def is_dynamic(obj: Any) -> bool:
    """True when ``obj`` cannot be found again by its module and qualified name elsewhere."""
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module_name or module_name == "__main__" or not qualname:
        return True
    module = sys.modules.get(module_name)
    if module is None:
        return True
    target: Any = module
    for part in qualname.split("."):
        if part == "<locals>":
            return True
        target = getattr(target, part, _MISSING)
        if target is _MISSING:
            return True
    return target is not obj


# -- rebuilding (called while unpickling) ------------------------------------------------------


def make_function(
    code: types.CodeType,
    globals_from: str | dict[str, Any],
    name: str,
    closure: tuple[types.CellType, ...] | None,
    *,
    namespace: dict[str, Any],
) -> types.FunctionType:
    """A function skeleton: code, globals and closure cells; the rest comes with its state.

    ``globals_from`` is ``"__main__"`` (the restoring namespace), a module name (that module's
    globals), or a dict of the few globals a generated function had of its own. A restoring
    namespace without ``__builtins__`` gets them, as ``exec`` gives a cell's globals: without
    them, C code a function calls that imports (``ndarray.sum``) raises ``KeyError``.
    """
    if isinstance(globals_from, dict):
        globals_ = {"__builtins__": builtins, **globals_from}
    elif globals_from == "__main__":
        globals_ = namespace
        globals_.setdefault("__builtins__", builtins)
    else:
        globals_ = vars(importlib.import_module(globals_from))
    return types.FunctionType(code, globals_, name, None, closure)


def set_function_state(func: types.FunctionType, state: dict[str, Any]) -> types.FunctionType:
    """Fill in a function skeleton: defaults, annotations, attributes, names."""
    for attr in ("__defaults__", "__kwdefaults__", "__qualname__", "__module__", "__doc__"):
        setattr(func, attr, state[attr])
    func.__annotations__ = state["__annotations__"]
    func.__dict__.update(state["__dict__"])
    return func


def make_cell() -> types.CellType:
    """An empty closure cell; its contents are set with its state."""
    return types.CellType()


def set_cell_state(cell: types.CellType, contents: Any) -> types.CellType:
    """Set a closure cell's contents (an empty cell stays empty)."""
    if not (isinstance(contents, str) and contents == _EMPTY_CELL):
        cell.cell_contents = contents
    return cell


def make_mappingproxy(mapping: dict[Any, Any]) -> types.MappingProxyType[Any, Any]:
    """A read-only view of ``mapping`` (as found in dataclass field metadata)."""
    return types.MappingProxyType(mapping)


def load_code(data: bytes) -> types.CodeType:
    """A code object from its marshalled bytes, constants included (how older checkpoints saved code)."""
    return marshal.loads(data)


def make_code(data: bytes, consts: tuple[Any, ...]) -> types.CodeType:
    """A code object from its marshalled bytes, without constants, and its pickled constants."""
    return marshal.loads(data).replace(co_consts=consts)


def make_cached_property(func: Callable[..., Any], attrname: str | None) -> functools.cached_property:
    """A ``functools.cached_property`` around ``func`` (its lock is not saved, a new one is made)."""
    prop = functools.cached_property(func)
    prop.attrname = attrname
    return prop


# -- reducing (called while pickling) ----------------------------------------------------------


def _code_names(code: types.CodeType) -> set[str]:
    """Global names a code object (and the code nested in it) may look up."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _globals_source(func: types.FunctionType) -> str | dict[str, Any]:
    """Where a rebuilt function takes its globals from (see ``make_function``)."""
    found = func.__globals__
    module_name = found.get("__name__")
    module = sys.modules.get(module_name) if isinstance(module_name, str) else None
    if module is not None and vars(module) is found:
        return module_name
    if module_name == "__main__" and "__spec__" not in found:
        return "__main__"  # a namespace made by exec, standing for the notebook's
    # A copy of a module's globals (attrs' generated methods copy the notebook's, __spec__
    # included) or generated code's private globals (namedtuple's __new__): keep what it uses.
    return {name: found[name] for name in sorted(_code_names(func.__code__)) if name in found}


def reduce_function(func: types.FunctionType) -> tuple[Any, ...]:
    """Reduce a dynamic function to a skeleton plus state."""
    globals_from = _globals_source(func)
    state = {
        "__defaults__": func.__defaults__,
        "__kwdefaults__": func.__kwdefaults__,
        "__qualname__": func.__qualname__,
        "__module__": func.__module__,
        "__doc__": func.__doc__,
        "__annotations__": dict(func.__annotations__),
        "__dict__": dict(func.__dict__),
    }
    args = (func.__code__, globals_from, func.__name__, func.__closure__)
    return (make_function, args, state, None, None, set_function_state)


def reduce_code(code: types.CodeType) -> tuple[Any, ...]:
    """Reduce code to marshalled bytes plus its constants, pickled with everything else.

    The compiler makes equal constants of one cell one object (the ``('axis',)`` of two methods
    that both call ``f(axis=0)``); pickled in the shared memo they stay one object, so the class
    holds the same object graph after a restore as before.
    """
    return (make_code, (marshal.dumps(code.replace(co_consts=())), code.co_consts))


def reduce_cell(cell: types.CellType) -> tuple[Any, ...]:
    """Reduce a closure cell to an empty cell plus its contents."""
    try:
        contents = cell.cell_contents
    except ValueError:
        contents = _EMPTY_CELL
    return (make_cell, (), contents, None, None, set_cell_state)


def make_lru_cache(func: Callable[..., Any], maxsize: int | None, typed: bool) -> Any:
    """``functools.lru_cache`` around a rebuilt function (the cache itself starts empty)."""
    return functools.lru_cache(maxsize=maxsize, typed=typed)(func)


def reduce_lru_cache(wrapper: Any) -> tuple[Any, ...] | Any:
    """A notebook ``@lru_cache`` function: its wrapped function by value, a new empty cache."""
    if not is_dynamic(wrapper):
        return NotImplemented
    params = wrapper.cache_parameters()
    return (make_lru_cache, (wrapper.__wrapped__, params["maxsize"], params["typed"]))


def reduce_module(module: types.ModuleType) -> tuple[Any, ...]:
    """A module is saved by name and imported again on load (an extension's submodule that its
    name does not lead back to, as its package's attribute: ``modulepaths``)."""
    if module.__name__ == "__main__":
        raise TypeError("the notebook's own __main__ module is not saved; save its variables instead")
    where = modulepaths.address(module)
    if modulepaths.SEPARATOR in where:
        return (modulepaths.find, (where,))
    return (importlib.import_module, (module.__name__,))


def refuse_file(obj: io.IOBase) -> tuple[Any, ...]:
    """Open files are never saved: restoring one could truncate or move the file on disk."""
    name = getattr(obj, "name", None)
    raise TypeError(f"open file {name!r} is not saved (restoring a handle can change the file); reopen it after resume")


def refuse_environ(obj: Any) -> tuple[Any, ...]:
    """``os.environ`` is never saved: it holds credentials."""
    raise TypeError("os.environ is not saved (it holds credentials); name the values you need instead")


def reduce_descriptor(obj: Any) -> tuple[Any, ...]:
    """staticmethod / classmethod / property objects found in a dynamic class."""
    if isinstance(obj, property):
        return (property, (obj.fget, obj.fset, obj.fdel, obj.__doc__))
    if isinstance(obj, functools.cached_property):
        return (make_cached_property, (obj.func, obj.attrname))
    return (type(obj), (obj.__func__,))


def reduce_dataclass_sentinel(obj: Any) -> tuple[Any, ...]:
    """Dataclass field markers are module singletons; identity checks in ``dataclasses`` need them."""
    return (getattr, (dataclasses, obj.name))


REDUCERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {
    types.CellType: reduce_cell,
    functools._lru_cache_wrapper: reduce_lru_cache,  # type: ignore[attr-defined]
    types.CodeType: reduce_code,
    types.ModuleType: reduce_module,
    typing.TypeVar: reduce_typevar,
    typing.ParamSpec: reduce_typevar,
    staticmethod: reduce_descriptor,
    classmethod: reduce_descriptor,
    property: reduce_descriptor,
    functools.cached_property: reduce_descriptor,
    types.MappingProxyType: lambda proxy: (make_mappingproxy, (dict(proxy),)),
    dataclasses._MISSING_TYPE: lambda _: (getattr, (dataclasses, "MISSING")),  # type: ignore[attr-defined]
    type(os.environ): refuse_environ,
    dataclasses._FIELD_BASE: reduce_dataclass_sentinel,  # type: ignore[attr-defined]
}


def reduce_by_value(obj: Any) -> tuple[Any, ...] | Any:
    """The reduction for ``obj`` if it needs one here, else ``NotImplemented`` (plain pickle)."""
    kind = type(obj)
    reducer = REDUCERS.get(kind)
    if reducer is not None:
        return reducer(obj)
    if kind is types.FunctionType:
        return reduce_function(obj) if is_dynamic(obj) else NotImplemented
    if isinstance(obj, type):
        if not (obj.__flags__ & _HEAPTYPE and is_dynamic(obj)):
            return NotImplemented
        return reduce_enum(obj) if isinstance(obj, enum.EnumMeta) else reduce_class(obj)
    if isinstance(obj, io.IOBase):
        return refuse_file(obj)
    if kind.__module__ == parametrized.PARAMETRIZE and parametrized.is_parametrized(obj):
        return parametrized.reduce_parametrized(obj)
    return NotImplemented
