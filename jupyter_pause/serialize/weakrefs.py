"""Weak references: saved pointing at their referent, so they come back pointing at the same
restored object, and checked after the dump: a weak reference whose referent no saved variable
holds strongly would come back dead, so its variable is named instead.

A ``weakref.ref`` that is already dead comes back dead; a dead proxy is named. Weak containers
(``WeakValueDictionary``, ``WeakKeyDictionary``, ``WeakSet``) are saved by their items.
"""

from __future__ import annotations

import ctypes
import re
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

#: The referent's address at the end of a proxy's repr.
_ADDRESS = re.compile(r"at (0x[0-9a-fA-F]+)>?$")


class _Referent:
    """A weakly referenceable stand-in, for rebuilding a reference that was already dead."""


def dead_reference(kind: str) -> Any:
    """A dead ``weakref.ref`` (``kind`` is "ref"; a dead proxy is named, not saved)."""
    if kind != "ref":
        raise TypeError(f"no dead weak reference of kind {kind!r} is rebuilt")
    return weakref.ref(_Referent())  # the stand-in is gone as soon as the call returns


def _proxy_referent(proxy: Any) -> Any:
    """The object a live proxy points to (a proxy hides it; its repr carries the address)."""
    match = _ADDRESS.search(repr(proxy))
    if match is None:
        raise TypeError(f"cannot find the referent of weak proxy {repr(proxy)!r}")
    candidate = ctypes.cast(int(match.group(1), 16), ctypes.py_object).value
    if not any(ref is proxy for ref in weakref.getweakrefs(candidate)):
        raise TypeError(f"cannot find the referent of weak proxy {repr(proxy)!r}")
    return candidate


def is_dead_proxy(proxy: Any) -> bool:
    """Whether ``proxy`` is a weak proxy whose object is gone (asking its type raises)."""
    try:
        proxy.__class__  # noqa: B018 - forwarded to the referent; raises once it is gone
    except ReferenceError:
        return True
    return False


@dataclass
class WeakCheck:
    """Referents met through weak references while dumping, by the variable that holds them."""

    current: str = ""
    referents: dict[int, tuple[Any, set[str]]] = field(default_factory=dict)

    def met(self, referent: Any) -> None:
        entry = self.referents.setdefault(id(referent), (referent, set()))
        entry[1].add(self.current)

    def weak_only(self, strong: set[int]) -> dict[str, str]:
        """Per variable, why it cannot come back: the referents no strong path saves."""
        reasons: dict[str, str] = {}
        for key, (referent, names) in self.referents.items():
            if key in strong:
                continue
            for name in sorted(names):
                reasons.setdefault(
                    name,
                    f"it holds a weak reference to a {type(referent).__qualname__} object that no saved "
                    "variable holds, so it would come back dead; save that object too, or drop the reference",
                )
        return reasons


#: The check the reducers report to while a dump runs (one dump at a time holds the pickler lock).
check = WeakCheck()


def reduce_ref(ref: weakref.ref) -> tuple[Any, ...]:
    """A ``weakref.ref``: the referent and callback, or a dead reference."""
    target = ref()
    if target is None:
        return (dead_reference, ("ref",))
    check.met(target)
    callback = ref.__callback__
    return (weakref.ref, (target,) if callback is None else (target, callback))


def reduce_proxy(proxy: Any) -> tuple[Any, ...]:
    """A weak proxy: its referent, or a dead proxy of the same type."""
    if is_dead_proxy(proxy):
        # It could come back dead (``dead_reference``), but the restore test's digest cannot read
        # a dead proxy yet: named rather than saved.
        raise TypeError("a dead weak proxy is not saved (the object it pointed to is gone); drop it")
    target = _proxy_referent(proxy)
    check.met(target)
    return (weakref.proxy, (target,))


def reduce_weak_method(ref: weakref.WeakMethod) -> tuple[Any, ...]:
    """A ``weakref.WeakMethod``: rebuilt on the bound method of the restored object."""
    method = ref()
    if method is None:
        raise TypeError("a dead weakref.WeakMethod is not saved (its object is gone); drop it")
    check.met(method.__self__)
    return (weakref.WeakMethod, (method,))


def reduce_weak_values(mapping: weakref.WeakValueDictionary) -> tuple[Any, ...]:
    """A ``WeakValueDictionary`` by its items; each value must be saved strongly elsewhere."""
    items = list(mapping.items())
    for _, value in items:
        check.met(value)
    return (type(mapping), (), None, None, iter(items))


def reduce_weak_keys(mapping: weakref.WeakKeyDictionary) -> tuple[Any, ...]:
    """A ``WeakKeyDictionary`` by its items; each key must be saved strongly elsewhere."""
    items = list(mapping.items())
    for key, _ in items:
        check.met(key)
    return (type(mapping), (), None, None, iter(items))


def reduce_weak_set(weak: weakref.WeakSet) -> tuple[Any, ...]:
    """A ``WeakSet`` by its items; each must be saved strongly elsewhere."""
    items = list(weak)
    for item in items:
        check.met(item)
    return (type(weak), (items,))


REDUCERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {
    weakref.ReferenceType: reduce_ref,
    weakref.ProxyType: reduce_proxy,
    weakref.CallableProxyType: reduce_proxy,
    weakref.WeakMethod: reduce_weak_method,
    weakref.WeakValueDictionary: reduce_weak_values,
    weakref.WeakKeyDictionary: reduce_weak_keys,
    weakref.WeakSet: reduce_weak_set,
}


def placeholder(obj: Any) -> tuple[Any, ...]:
    """What the strong-path probe writes for anything weak: nothing of its referents."""
    return (int, ())
