"""An eval-mode twin of a module tree: the model check's forward pass runs on it, so the live
modules keep their train/eval flags while the check runs beside the pickler and the digests.

Each module of the tree gets a twin of the same class whose attributes are the module's own
(its parameters and buffers the very same tensors: nothing is copied but a few dicts), whose
``training`` is False, and in which every module it holds, as a submodule or in a plain
attribute, list, tuple or dict (a Hugging Face attention layer keeps its kernel functions so),
is that module's twin. A forward pass of the twin computes what the module's forward computes in
eval mode. What the pass assigns (a buffer, a cache attribute, an entry of a list or dict the
module holds) lands in the twin, not in the module.

A tree the twin cannot stand in for gets none (``of`` returns None), and the check falls back to
switching the live modules for a moment: one that reaches a module through a bound method, a
partial or a closure (which the twin cannot point at a twin: that module would run in its own
mode), a compiled, scripted or distributed wrapper, a lazy module not yet initialised (its first
pass would create its parameters in the twin only), or a class without an instance dict.
"""

from __future__ import annotations

import functools
import types
from collections import OrderedDict
from typing import Any

#: The attributes of ``torch.nn.Module`` that hold the tensors: copied as they are.
_TENSORS = ("_parameters", "_buffers")

#: The containers a twin is rebuilt through, a module in them swapped for its twin.
_CONTAINERS = (list, tuple, dict, OrderedDict, set, frozenset)

#: Where the wrappers live whose forward reaches the wrapped module past the tree (a compiled
#: module's forward is a closure over the original one's ``__call__``).
_WRAPPERS = ("torch._dynamo", "torch.jit", "torch.distributed", "torch.nn.parallel")

#: How deep into an attribute's containers, partials and closures a module reference is looked for.
_DEPTH = 4

#: A container of more items than this is not looked through: its module falls back.
_LONGEST = 1000


def of(module: Any) -> Any | None:
    """The eval-mode twin of ``module``'s tree, or None where one cannot stand in for it."""
    import torch

    if not isinstance(module, torch.nn.Module):
        return None
    reached = _reached(module, torch.nn.Module)
    if reached is None or not all(_twinnable(m, torch) for m in reached):
        return None
    return _twin(module, {}, torch.nn.Module)


def _reached(root: Any, module_type: type) -> list[Any] | None:
    """Every module ``root`` reaches through its submodules and plain attributes and containers,
    or None where one is reached in a way the twin could not swap (``_held``)."""
    seen = {id(root): root}
    todo = [root]
    while todo:
        for name, value in getattr(todo.pop(), "__dict__", {}).items():
            if name == "_modules":  # however many: a tree's own submodules are always swapped
                held = [m for m in value.values() if m is not None]
            else:
                held = [] if name in _TENSORS else _held(value, module_type, _DEPTH)
            if held is None:
                return None
            for m in held:
                if id(m) not in seen:
                    seen[id(m)] = m
                    todo.append(m)
    return list(seen.values())


def _held(value: Any, module_type: type, depth: int) -> list[Any] | None:
    """The modules ``value`` is or holds in plain containers, or None where it reaches one the twin
    could not swap: through a function, partial or bound method, a container of its own class, or
    a container too long or too deep to look through."""
    if isinstance(value, module_type):
        return [value]
    if isinstance(value, _CONTAINERS):
        if depth == 0 or len(value) > _LONGEST:
            return None
        held: list[Any] = []
        for item in value.values() if isinstance(value, dict) else value:
            inner = _held(item, module_type, depth - 1)
            if inner is None:
                return None
            held += inner
        return None if held and type(value) not in _CONTAINERS else held
    if depth and isinstance(value, (functools.partial, types.MethodType, types.FunctionType)):
        # Whatever module a callable reaches, it reaches past the twin: none may be there.
        parts = _callable_parts(value)
        return None if any(_held(v, module_type, depth - 1) != [] for v in parts) else []
    return []


def _callable_parts(value: Any) -> list[Any]:
    """What a function, partial or bound method holds: its function, arguments, closure."""
    if isinstance(value, functools.partial):
        return [value.func, *value.args, *value.keywords.values()]
    if isinstance(value, types.MethodType):
        return [value.__self__, value.__func__]
    return [*_cells(value.__closure__), getattr(value, "__wrapped__", None)]


def _twinnable(m: Any, torch: Any) -> bool:
    kind = type(m)
    if kind.__module__.startswith(_WRAPPERS) or not hasattr(m, "__dict__"):
        return False
    return not (isinstance(m, torch.nn.modules.lazy.LazyModuleMixin) and m.has_uninitialized_params())


def _cells(closure: tuple[Any, ...] | None) -> list[Any]:
    """What a function's closure holds (a cell not yet assigned holds nothing)."""
    held = []
    for cell in closure or ():
        try:
            held.append(cell.cell_contents)
        except ValueError:
            pass
    return held


def _twin(module: Any, twins: dict[int, Any], module_type: type) -> Any:
    """The twin of ``module`` (one per module: a module reached twice has one twin)."""
    made = twins.get(id(module))
    if made is not None:
        return made
    twin = object.__new__(type(module))
    twins[id(module)] = twin
    own = vars(twin)
    for name, value in vars(module).items():
        own[name] = _swapped(value, twins, module_type)
    own["training"] = False
    return twin


def _swapped(value: Any, twins: dict[int, Any], module_type: type) -> Any:
    """``value`` with each module it holds in plain containers swapped for its twin; a container
    copied even where it holds none (what a pass assigns into it stays in the twin)."""
    if isinstance(value, module_type):
        return _twin(value, twins, module_type)
    kind = type(value)
    if kind is dict or kind is OrderedDict:
        return kind((k, _swapped(v, twins, module_type)) for k, v in value.items())
    if kind in _CONTAINERS:
        return kind(_swapped(v, twins, module_type) for v in value)
    return value
