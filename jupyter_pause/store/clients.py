"""The fsspec filesystems a store talks through: one client per URL, options and credentials."""

from __future__ import annotations

import threading
from typing import Any

import fsspec

from . import credentials

#: Object store clients by (URL, options, where credentials come from): a store opened again
#: while none of those changed gets the client made the first time (making one, and its first
#: request, takes a tenth of a second and more); one changed makes a new client.
_clients: dict[str, tuple[Any, str]] = {}
_clients_lock = threading.Lock()


def filesystem(url: str, options: dict[str, Any]) -> tuple[Any, str]:
    """The fsspec filesystem and root of ``url``: for an object store, the client made before
    for the same URL, options and credentials environment, else a new one."""
    if "://" not in url or url.startswith(("file://", "local://")):
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
