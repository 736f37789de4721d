"""Which variables a checkpoint saves: the default selection, named selections, exclusions."""

from __future__ import annotations

import builtins
import fnmatch
import re
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import SelectionError
from ..serialize import modulepaths
from ..store.manifest import SkippedRecord

#: Name fragments that mark a secret wherever they appear in a name.
SECRET_FRAGMENTS = ("password", "passwd", "secret", "api_key", "apikey", "credential", "private_key")

#: Whole name parts that mark a secret (``hf_token``, ``AuthToken``; not ``tokenizer``).
SECRET_PARTS = frozenset({"token", "pwd", "passphrase"})

#: Names IPython and ipykernel put into every namespace or its builtins. A variable under one of
#: them is left out only while it holds IPython's own object (``ipython_own``); a value of the
#: user's there is saved like any other, and named as shadowing IPython's.
IPYTHON_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open", "display"})


def type_name(value: Any) -> str:
    """``module.Qualname`` of a value's type, never raising (dead proxies raise on access)."""
    kind = type(value)
    module = getattr(kind, "__module__", "?")
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def looks_secret(name: str) -> bool:
    """Whether a variable name looks like it holds a credential.

    Fragments (``*password*``, ``*secret*``, ``*api_key*``, ``*credential*`` ...) match anywhere;
    ``token`` matches as a whole part of the name, so ``api_token`` is a secret and ``tokenizer``
    or ``max_new_tokens`` are not.
    """
    lowered = name.lower()
    if any(fragment in lowered for fragment in SECRET_FRAGMENTS):
        return True
    parts = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())
    return any(part in SECRET_PARTS for part in parts)


def ipython_own(name: str, value: Any, hidden: Mapping[str, Any]) -> bool:
    """Whether ``value`` is the very object IPython put under ``name``: in the namespace
    (``hidden``, IPython's ``user_ns_hidden``) or in builtins (``display``). By identity: the
    user's own value under the same name is not IPython's."""
    return any(name in owner and owner[name] is value for owner in (hidden, vars(builtins)))


def shadowing(names: Iterable[str], hidden: Mapping[str, Any], done: str) -> list[str]:
    """A note for each of ``names`` that IPython also uses (``display: restored (it shadows
    IPython's display)``), ``done`` saying what happened to it. ``hidden`` empty: not IPython's
    namespace (``__main__`` of a script, a namespace passed in), so nothing there is IPython's."""
    return [
        f"{name}: {done} (it shadows IPython's {name})"
        for name in names
        if hidden and not name.startswith("_") and (name in IPYTHON_NAMES or name in hidden)
    ]


@dataclass
class Selection:
    """Variables chosen for a checkpoint, and those left out with the reason."""

    values: dict[str, Any] = field(default_factory=dict)
    skipped: list[SkippedRecord] = field(default_factory=list)
    imports: dict[str, str] = field(default_factory=dict)


def _is_module(value: Any) -> bool | None:
    try:
        return isinstance(value, types.ModuleType)
    except Exception:  # an object whose type check raises (a dead weakref.proxy): reported
        return None


def select(
    namespace: dict[str, Any],
    names: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
    hidden: Mapping[str, Any] | None = None,
) -> Selection:
    """Choose what to save from ``namespace``.

    Parameters
    ----------
    namespace
        The user's namespace.
    names
        Exactly these names (secret-looking ones included); ``None`` means the default selection:
        everything but private names, IPython's own, modules and secret-looking names. Modules
        are not saved; their names are kept in ``imports`` so a resume imports them again (an
        extension's submodule as its package's attribute: ``serialize.modulepaths``).
    exclude
        Glob patterns of names to leave out.
    hidden
        IPython's own objects by name (its ``user_ns_hidden``): a name is left out silently
        while it holds that object (or IPython's builtin of that name, such as ``display``);
        a user's value under the name is saved.
    """
    excluded = list(exclude)
    selection = Selection()
    if names is not None:
        names = list(dict.fromkeys(names))
        missing = [n for n in names if n not in namespace]
        if missing:
            raise SelectionError(
                f"no variable named {', '.join(missing)} in the namespace; "
                "check the spelling, or run the cell that defines it first"
            )
        for name in names:
            if not any(fnmatch.fnmatchcase(name, p) for p in excluded):
                selection.values[name] = namespace[name]
        return selection
    hidden = hidden if hidden is not None else {}
    for name, value in list(namespace.items()):
        if name.startswith("_") or ipython_own(name, value, hidden):
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in excluded):
            continue
        module = _is_module(value)
        if module:
            if value.__name__ != "__main__":
                selection.imports[name] = modulepaths.address(value)
            continue
        if module is None:
            reason = "cannot be inspected (it raises on access; a dead weak proxy?)"
            selection.skipped.append(SkippedRecord(name, type_name(value), reason))
            continue
        if looks_secret(name):
            reason = "looks like a secret; name it explicitly to save it"
            selection.skipped.append(SkippedRecord(name, type_name(value), reason))
            continue
        selection.values[name] = value
    return selection
