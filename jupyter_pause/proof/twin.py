"""An eval-mode twin of a module tree: the model check's forward pass runs on it, so the live
modules keep their train/eval flags while the check runs beside the pickler and the digests.

Each module of the tree gets a twin of the same class whose attributes are the module's own
(its parameters and buffers the very same tensors: nothing is copied but a few dicts), whose
submodules are their twins, and whose ``training`` is False. A forward pass of the twin computes
what the module's forward computes in eval mode. What the pass assigns (a buffer, a cache
attribute, an entry of a list or dict the module holds) lands in the twin, not in the module.

A tree the twin cannot stand in for gets none (``of`` returns None), and the check falls back to
switching the live modules for a moment: one that reaches a module other than through its
submodules (a plain attribute, a list, a bound method or a closure: that module would run in its
own mode), a compiled, scripted or distributed wrapper, a lazy module not yet initialised (its
first pass would create its parameters in the twin only), or a class without an instance dict.
"""

from __future__ import annotations

import functools
import types
from typing import Any

#: The attributes of ``torch.nn.Module`` that hold the tree itself: the twin rebuilds or copies them.
_TREE = ("_modules", "_parameters", "_buffers")

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

    if not all(_twinnable(m, torch) for m in module.modules()):
        return None
    return _twin(module, {})


def _twinnable(m: Any, torch: Any) -> bool:
    kind = type(m)
    if kind.__module__.startswith(_WRAPPERS) or not hasattr(m, "__dict__"):
        return False
    if isinstance(m, torch.nn.modules.lazy.LazyModuleMixin) and m.has_uninitialized_params():
        return False
    return not any(_may_reach_module(v, torch.nn.Module, _DEPTH) for k, v in vars(m).items() if k not in _TREE)


def _may_reach_module(value: Any, module_type: type, depth: int) -> bool:
    """Whether ``value`` is or holds a module: inside containers, partials, bound methods, closures
    (a container too long to look through is taken to)."""
    if isinstance(value, module_type):
        return True
    if depth == 0:
        return False
    inner: list[Any]
    if isinstance(value, (list, tuple, set, frozenset, dict)) and len(value) > _LONGEST:
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        inner = list(value)
    elif isinstance(value, dict):
        inner = list(value.values())
    elif isinstance(value, functools.partial):
        inner = [value.func, *value.args, *value.keywords.values()]
    elif isinstance(value, types.MethodType):
        inner = [value.__self__, value.__func__]
    elif isinstance(value, types.FunctionType):
        inner = [*_cells(value.__closure__), getattr(value, "__wrapped__", None)]
    else:
        return False
    return any(_may_reach_module(v, module_type, depth - 1) for v in inner)


def _cells(closure: tuple[Any, ...] | None) -> list[Any]:
    """What a function's closure holds (a cell not yet assigned holds nothing)."""
    held = []
    for cell in closure or ():
        try:
            held.append(cell.cell_contents)
        except ValueError:
            pass
    return held


def _twin(module: Any, twins: dict[int, Any]) -> Any:
    """The twin of ``module`` (one per module: a module shared in the tree has one shared twin)."""
    made = twins.get(id(module))
    if made is not None:
        return made
    twin = object.__new__(type(module))
    twins[id(module)] = twin
    own = vars(twin)
    for name, value in vars(module).items():
        own[name] = type(value)(value) if type(value) in (list, dict, set) else value
    own["training"] = False
    own["_modules"] = {name: None if m is None else _twin(m, twins) for name, m in module._modules.items()}
    return twin
