"""The fsspec filesystems a store talks through: one client per URL, options and credentials."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import fsspec
from fsspec.registry import known_implementations, registry

from ..errors import StoreError
from . import credentials

T = TypeVar("T")

#: Object store clients by (URL, options, where credentials come from): a store opened again
#: while none of those changed gets the client made the first time (making one, and its first
#: request, takes a tenth of a second and more); one changed makes a new client.
_clients: dict[str, tuple[Any, str]] = {}
_clients_lock = threading.Lock()


def is_local(url: str) -> bool:
    """Whether ``url`` names a folder on this machine (a path, ``file://`` or ``local://``)."""
    return "://" not in url or url.startswith(("file://", "local://"))


def opened(step: Callable[..., T], url: str, *args: Any, display: str, scrub: Callable[[str], str]) -> T:
    """``step(url, *args)``, a failure to open the store at ``url`` (shown as ``display``, its
    secrets taken out by ``scrub``) raised as a ``StoreError`` that says what to check."""
    try:
        return step(url, *args)
    except (ImportError, ValueError, TypeError, OSError) as e:
        raise StoreError(
            f"cannot open store {display}: {scrub(str(e))}; check the URL "
            "scheme and install the fsspec backend it needs (s3fs for s3://, gcsfs for gs://)"
        ) from e


def check_protocol(url: str) -> None:
    """Raise what opening ``url`` would for a protocol fsspec does not know (``ValueError``) or
    whose library is not installed (``ImportError``), without importing that library: an object
    store's client is made on first use (importing s3fs takes a fifth of a second)."""
    protocol = url.split("://", 1)[0]
    known = registry.get(protocol) or known_implementations.get(protocol)
    if known is None:
        raise ValueError(f"Protocol not known: {protocol}")
    if isinstance(known, dict) and importlib.util.find_spec(known["class"].split(".", 1)[0]) is None:
        raise ImportError(known.get("err") or f"{known['class']} is not installed")


def filesystem(url: str, options: dict[str, Any]) -> tuple[Any, str]:
    """The fsspec filesystem and root of ``url``: for an object store, the client made before
    for the same URL, options and credentials environment, else a new one."""
    if is_local(url):
        return fsspec.url_to_fs(url, **options)
    options = {"skip_instance_cache": True, **options}
    key = repr((url, sorted(options.items(), key=lambda kv: kv[0]), credentials.environment()))
    with _clients_lock:
        found = _clients.get(key)
    if found is None:
        found = fsspec.url_to_fs(url, **options)
        with _clients_lock:
            if len(_clients) > 64:
                _clients.clear()
            found = _clients.setdefault(key, found)
    return found


def mtime(info: dict[str, Any]) -> float | None:
    """When an object was last written (epoch seconds), from whichever field its listing gives."""
    for field in ("mtime", "LastModified", "created", "updated"):
        value = info.get(field)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return float(value.timestamp())
        try:
            return float(value)
        except (TypeError, ValueError):
            continue
    return None
