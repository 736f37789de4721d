"""torch modules with parametrizations (``weight_norm``, ``register_parametrization``) by value.

torch refuses to pickle a parametrized module: the class it puts in place of the module's own
(``ParametrizedLinear``) is made at run time, one per module. Such a module is saved as an object
of its own class with its attributes (the parametrizations, with their original tensors and the
modules that compute from them) and is made parametrized again on load with torch's helpers, so an
optimizer that holds the original tensors still trains the same module.
"""

from __future__ import annotations

from typing import Any

#: The module whose code makes the classes of parametrized modules.
PARAMETRIZE = "torch.nn.utils.parametrize"


def is_parametrized(obj: Any) -> bool:
    """Whether ``obj`` is a module that torch's ``parametrize`` gave a class of its own."""
    kind = type(obj)
    if kind.__module__ != PARAMETRIZE or not kind.__name__.startswith("Parametrized"):
        return False
    return "parametrizations" in getattr(obj, "_modules", {})


def make_module(base: type) -> Any:
    """An empty module of the class the module had before it was parametrized."""
    return base.__new__(base)


def set_module_state(module: Any, state: dict[str, Any]) -> Any:
    """Fill in the module's attributes, then parametrize its class again (one property per tensor)."""
    from torch.nn.utils import parametrize

    module.__dict__.update(state)
    parametrize._inject_new_class(module)
    for name in module.parametrizations:
        parametrize._inject_property(module, name)
    return module


def reduce_parametrized(module: Any) -> tuple[Any, ...]:
    """Reduce a parametrized module to its original class plus its attributes."""
    base = type(module).__bases__[0]
    return (make_module, (base,), dict(vars(module)), None, None, set_module_state)
