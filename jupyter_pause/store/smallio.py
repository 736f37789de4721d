"""Many small objects read or written at once on an object store whose client runs its own event
loop (s3fs, gcsfs, adlfs): one request each, gathered there rather than sent from threads (on
SeaweedFS on loopback about half the time). ``Store.read_many`` and ``Store.write_many`` with
``small`` come here (``store``: that ``Store``); blobs never do, since nothing here splits a
large object into parts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .buffers import Buffer
from .encryption import DecryptionError, plaintext
from .transfers import Counter


def read_small(store: Any, keys: list[str], done: Counter, then: Callable[[str, Buffer], Any] | None) -> dict[str, Any]:
    """``read_many(small=True)`` on an async backend: one whole-object GET a key, gathered."""

    def finish(key: str, data: Any) -> Any:
        if isinstance(data, FileNotFoundError):
            return FileNotFoundError(f"{key} not found in store {store.display_url}")
        if isinstance(data, BaseException):
            return store.failure("read", key, data)
        try:
            view = memoryview(bytes(data))
            view = plaintext(key, view) if store.cipher is None else store.cipher.open(key, view)
        except DecryptionError as e:
            return e
        done.add(len(view))
        if then is None:
            return view
        try:
            return then(key, view)
        except Exception as e:
            return e

    found = store.backend.read_small([store.path(key) for key in keys])
    return {key: finish(key, data) for key, data in zip(keys, found, strict=True)}


def write_small(store: Any, items: dict[str, bytes | bytearray | memoryview], done: Counter) -> None:
    """``write_many(small=True)`` on an async backend: one PUT a key, gathered; the first
    failure raised once all have stopped."""
    sealer = store.sealer
    sealed = {key: data if sealer is None else sealer.seal(key, data) for key, data in items.items()}
    errors = store.backend.write_small({store.path(key): data for key, data in sealed.items()})
    for (key, data), error in zip(items.items(), errors, strict=True):
        if error is not None:
            raise store.failure("write", key, error) from error
        done.add(len(data))
