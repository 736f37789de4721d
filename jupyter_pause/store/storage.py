"""One small interface over fsspec: write, read, list and delete keys under a store's root.

``Store`` holds what every store shares: keys under a root, credentials kept out of messages,
errors that say what to do next, many keys read and written in parallel. What differs between a
local folder, S3, GCS and Azure Blob is its backend's (``store.backends``).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import StoreError
from . import conditions, credentials, layout, placeholders, smallio
from .backends import for_filesystem
from .backends.base import PARTS_IN_FLIGHT, SMALL_PARALLELISM, Backend
from .backends.local import LocalBackend
from .buffers import ALIGNMENT, REMOTE_BLOCK, REMOTE_CHUNK, Buffer, allocating
from .clients import check_protocol, filesystem, is_local, mtime, opened
from .credentials import redact
from .encryption import CHUNK, Cipher, DecryptionError, plain_size, plaintext, sealed_size
from .names import Names
from .prefetched import Prefetched
from .signing import Keyring, Keys, keyring
from .transfers import Counter, Progress

#: Blobs in flight at once when writing or reading many keys.
PARALLELISM = 8


__all__ = [
    "ALIGNMENT",
    "PARALLELISM",
    "PARTS_IN_FLIGHT",
    "REMOTE_BLOCK",
    "REMOTE_CHUNK",
    "SMALL_PARALLELISM",
    "Buffer",
    "Entry",
    "Progress",
    "Store",
]


@dataclass(frozen=True)
class Entry:
    """A key found in the store, with its size in bytes and modification time (epoch seconds)."""

    key: str
    size: int
    mtime: float | None


#: Reads prefetched copies (local files) whatever the store's own backend.
_NEAR = LocalBackend(None)


class Store:
    """A folder of keys (``a/b/c``) on any filesystem fsspec opens.

    Writes are whole-object puts: object stores have no rename, so nothing here relies on one.
    On a local folder every write is flushed to disk (fsync) before it returns.
    """

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        keys: Keys = None,
        encrypt: bool = True,
        prefetched: Prefetched | None = None,
    ) -> None:
        if not url or not isinstance(url, str):
            raise StoreError("no store URL given: set JUPYTER_PAUSE_STORE or pass --store URL")
        url = placeholders.expand(url)
        self.url = url
        self.display_url = redact(url)
        self._secrets = credentials.secrets(url, storage_options or {})
        self._options = credentials.storage_options(url, storage_options or {})
        self._backend: Backend | None = None
        self._opening = threading.Lock()
        self.local = is_local(url)
        if self.local or "::" in url:  # a folder here, or a chain of filesystems: opened now
            self._open()
        else:  # an object store's client is made on first use; a store that cannot be is refused now
            opened(check_protocol, url, display=self.display_url, scrub=self.scrub)
        #: The user's keys: they name the pool (``names``), open sealed objects (``cipher``) and,
        #: with ``encrypt``, seal every object written (``sealer``); None without a key.
        self.keys: Keyring | None = keyring(keys)
        self.names = Names(self.keys)
        self.cipher: Cipher | None = Cipher(self.keys) if self.keys is not None else None
        self.sealer = self.cipher if encrypt else None
        self.prefetched = prefetched  # pool blobs fetched onto this node ahead of a resume

    def _open(self) -> None:
        fs, root = opened(filesystem, self.url, self._options, display=self.display_url, scrub=self.scrub)
        self._root = root.rstrip("/")
        self.fs = fs

    @property
    def backend(self) -> Backend:
        """What talks to the store (``store.backends``), made on first use."""
        if self._backend is None:
            with self._opening:
                if self._backend is None:
                    self._open()
        assert self._backend is not None
        return self._backend

    @property
    def root(self) -> str:
        """The folder (or bucket and prefix) the keys are under, as the filesystem names it."""
        self.backend  # noqa: B018  # the filesystem says what the URL's root is
        return self._root

    @property
    def fs(self) -> Any:
        """The fsspec filesystem; setting another one (a test's broken one) changes the backend too."""
        return self.backend.fs

    @fs.setter
    def fs(self, fs: Any) -> None:
        self._backend = for_filesystem(fs)
        self.local = self._backend.local

    def __repr__(self) -> str:
        return f"Store({self.display_url!r})"

    def path(self, key: str) -> str:
        """The filesystem path of a key."""
        return f"{self.root}/{key}" if self.root else key

    def scrub(self, text: str) -> str:
        """``text`` with this store's credentials replaced by ``***``."""
        text = redact(text)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def failure(self, action: str, key: str, error: BaseException) -> StoreError:
        """The error for ``action`` on ``key`` that failed with ``error``: where, why (no secrets),
        what next; ``error`` itself where it says so already (the store could not be opened)."""
        if isinstance(error, StoreError):
            return error
        reason = self.scrub(str(error) or type(error).__name__)
        where = f"{key!r} in store {self.display_url}" if key else f"store {self.display_url}"
        return StoreError(
            f"cannot {action} {where}: {reason}; check that the store is reachable and writable, then try again"
        )

    def _fresh(self, path: str) -> str:
        """``path``, with what this client remembers of it forgotten (see ``Backend.fresh``)."""
        return self.backend.fresh(path)

    def write(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Put ``data`` at ``key`` in one piece (durable on disk for local stores). A blob of the
        pool, which other sessions' writers may be writing too, is never seen part-written."""
        try:
            view = memoryview(data).cast("B")
            if self.sealer is not None and len(view) > CHUNK:  # sealed a part at a time, never held twice
                self.backend.write_stream(self.path(key), self.sealer.seal_pieces(key, view), lambda: True)
                return
            if self.sealer is not None:
                view = self.sealer.seal(key, view)
            if layout.pool_digest(key):
                self.backend.write_whole(self.path(key), view)
            else:
                self.backend.write(self.path(key), view)
        except Exception as e:  # fsspec backends raise their own types; all mean the same here
            raise self.failure("write", key, e) from e

    def create(self, key: str, data: bytes) -> bool:
        """Put ``data`` at ``key`` only if nothing is there; False if something already was.

        The object appears whole or not at all. A local folder writes a temporary name, then
        links it to ``key`` (atomic, and refused if ``key`` exists). Other stores put it in one
        request with fsspec's exclusive mode (S3: ``If-None-Match``); a store that ignores the
        condition overwrites instead, so this looks first, and ``atomic_create`` says whether
        the store's own answer can be relied on.
        """
        try:
            if not self.local and self.fs.exists(self._fresh(self.path(key))):
                return False
            return self._create(key, data)
        except Exception as e:
            raise self.failure("create", key, e) from e

    def _create(self, key: str, data: bytes) -> bool:
        """``create`` without looking first: what the store itself answers."""
        if self.sealer is not None:
            data = bytes(self.sealer.seal(key, data))
        try:
            self.backend.create(self.path(key), data)
            return True
        except FileExistsError:
            return False
        except OSError as e:
            if conditions.precondition_failed(e):
                return False
            raise

    @functools.cached_property
    def atomic_create(self) -> bool:
        """Whether ``create`` is a true create-if-absent here: of two racing creates, one fails
        (``conditions.probe``, once per ``Store``)."""
        return conditions.probe(self)

    def read(self, key: str, mapped: bool = False, size: int | None = None) -> Buffer:
        """The bytes at ``key`` (a writable buffer, so arrays can be built on it without a copy).

        ``mapped``: a large local file comes back as a private mapping of it (``mapping``), copied
        only where written to; a pool blob prefetched onto this node's disk (``prefetched``) is
        read so, one prefetched into its shared memory is read into a buffer of its own.
        ``size``, where known (a blob's, from its manifest): a small remote object is fetched
        whole in one request, with no request for its size first.
        """
        blob = bool(layout.any_blob_digest(key))
        try:  # a blob never changes once written: what a listing said of it stays true
            stored = self._stored_size(size)
            with contextlib.nullcontext() if self.prefetched is None else self.prefetched.reading(key) as near:
                if near:  # the store's client is not even made (``backend``)
                    data = _NEAR.read(near, None, True, mapped and self.prefetched.mappable(near))
                else:
                    data = self.backend.read(self.path(key), stored, blob, mapped)
            return plaintext(key, data) if self.cipher is None else self.cipher.open(key, data)
        except FileNotFoundError:
            raise FileNotFoundError(f"{key} not found in store {self.display_url}") from None
        except DecryptionError:
            raise
        except Exception as e:
            raise self.failure("read", key, e) from e

    def read_range(self, key: str, start: int, stop: int) -> Buffer:
        """Bytes ``[start, stop)`` of the object at ``key`` (a tensor of a model file in the pool)."""
        try:
            if self.cipher is not None:
                return self.cipher.read_range(key, self._ranged(key), start, stop)
            return memoryview(self.fs.cat_file(self.path(key), start=start, end=stop))
        except FileNotFoundError:
            raise FileNotFoundError(f"{key} not found in store {self.display_url}") from None
        except Exception as e:
            raise self.failure("read", key, e) from e

    def _ranged(self, key: str) -> Callable[[int, int], bytes]:
        path = self.path(key)
        return lambda start, stop: self.fs.cat_file(path, start=start, end=stop)

    def download(self, key: str, target: str) -> None:
        """Copy the object at ``key`` into the local file ``target`` (written whole; a large
        object is never held in memory)."""
        try:
            if self.cipher is not None:
                with self.fs.open(self.path(key), "rb", block_size=REMOTE_BLOCK) as f, open(target, "wb") as out:
                    self.cipher.open_stream(key, f, out)
                return
            self.fs.get_file(self.path(key), target)
        except FileNotFoundError:
            raise FileNotFoundError(f"{key} not found in store {self.display_url}") from None
        except DecryptionError:
            raise
        except Exception as e:
            raise self.failure("copy", key, e) from e

    def write_stream(self, key: str, chunks: Iterable[bytes], keep: Callable[[], bool]) -> None:
        """Put the bytes of ``chunks`` at ``key``, a part at a time (a file too large to hold in
        memory); when ``keep()`` then answers False, the object is removed again."""
        try:
            if self.sealer is not None:
                chunks = self.sealer.seal_stream(key, chunks)
            self.backend.write_stream(self.path(key), chunks, keep)
        except Exception as e:
            raise self.failure("write", key, e) from e

    @property
    def mappable(self) -> bool:
        """Whether an object's file can be used as it lies (a local folder, its bytes not sealed)."""
        return self.local and self.sealer is None

    def read_many(
        self,
        keys: Iterable[str],
        progress: Progress | None = None,
        then: Callable[[str, Buffer], Any] | None = None,
        mapped: bool = False,
        small: bool = False,
        sizes: dict[str, int] | None = None,
        into: Callable[[str], Callable[[int], Buffer] | None] | None = None,
    ) -> dict[str, Any]:
        """Read keys in parallel; a key that fails maps to its exception instead of its bytes.

        ``progress(bytes_done)`` is called as each key arrives. ``then(key, data)`` runs in the
        reading thread as each key arrives (so checking overlaps reading): what it returns is
        kept instead of the bytes, and an exception it raises takes their place. ``mapped``, and
        ``sizes`` (key -> size, where known): as for ``read``.

        ``small``: the objects are small (ledger records, roll-ups), read whole in memory. On a
        remote store with an async backend (s3fs, gcsfs, adlfs) each is then one GET (no HEAD for
        its size first), ``SMALL_PARALLELISM`` at once on the backend's own event loop rather
        than through threads: on SeaweedFS on loopback about half the time of the threaded path.
        Blobs are not read this way: nothing here splits a large object into parts.

        ``into(key)``: where a key's bytes are read into, where it names an allocator (see
        ``buffers.allocating``): that key is then read, not mapped.
        """
        done = Counter(progress)
        if small and not self.local and getattr(self.fs, "async_impl", False):
            return smallio.read_small(self, list(dict.fromkeys(keys)), done, then)

        def one(key: str) -> Any:
            allocate = None if into is None else into(key)
            try:
                with allocating(allocate):
                    data = self.read(key, mapped and allocate is None, None if sizes is None else sizes.get(key))
            except (FileNotFoundError, StoreError, DecryptionError) as e:
                return e
            done.add(len(data))
            if then is not None:
                try:
                    return then(key, data)
                except Exception as e:
                    return e
            return data

        keys = list(dict.fromkeys(keys))
        with ThreadPoolExecutor(PARALLELISM) as pool:
            return dict(zip(keys, pool.map(one, keys), strict=True))

    def write_many(
        self, items: dict[str, bytes | bytearray | memoryview], progress: Progress | None = None, small: bool = False
    ) -> None:
        """Write keys in parallel; the first failure is raised once all writes have stopped.

        ``progress(bytes_done)`` is called as each key is written. ``small``: as for
        ``read_many``, each a single PUT gathered on the backend's event loop (remote async
        stores; elsewhere the same as without).
        """
        done = Counter(progress)
        if small and not self.local and getattr(self.fs, "async_impl", False) and items:
            smallio.write_small(self, items, done)
            return

        def one(key: str, data: bytes | bytearray | memoryview) -> None:
            self.write(key, data)
            done.add(len(data))

        if len(items) == 1:  # already on a worker thread, as a writer's hashing threads are
            one(*next(iter(items.items())))
            return
        with ThreadPoolExecutor(PARALLELISM) as pool:
            for future in [pool.submit(one, key, data) for key, data in items.items()]:
                future.result()

    def list(self, prefix: str) -> dict[str, Entry]:
        """Every key under ``prefix`` (recursive), with sizes and times; empty if none."""
        base = self._fresh(self.path(prefix).rstrip("/"))
        try:
            if not self.fs.exists(base):
                return {}
            found = self.fs.find(base, detail=True)
        except FileNotFoundError:
            return {}
        except Exception as e:
            raise self.failure("list", prefix, e) from e
        root = self.root.strip("/")
        entries = {}
        for path, info in found.items():
            if info.get("type") == "directory":
                continue
            path = path.strip("/")
            key = path[len(root) + 1 :] if root else path
            entries[key] = Entry(key, self._plain(int(info.get("size") or 0)), mtime(info))
        return entries

    def _stored_size(self, size: int | None) -> int | None:
        """The size in the store of an object of ``size`` bytes: sealed where this seals; unknown
        where it may be sealed or not (keys, but encryption switched off)."""
        if self.cipher is None or size is None:
            return size
        return sealed_size(size) if self.sealer is not None else None

    def _plain(self, stored: int | None) -> int | None:
        """The size of the bytes an object of ``stored`` bytes holds: with a cipher, what it seals
        (an object of no sealed size, written before encryption was on, counts as it is)."""
        if stored is None or self.sealer is None:
            return stored
        plain = plain_size(stored)
        return stored if plain is None else plain

    def sizes(self, keys: Iterable[str]) -> dict[str, int | None]:
        """The size of each of ``keys``, None for one that is not there: asked of the store key
        by key, many at once (no listing), for a few keys among many."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        try:
            found = self.backend.sizes([self._fresh(self.path(key)) for key in keys])
        except Exception as e:
            raise self.failure("look up", keys[0], e) from e
        return {key: self._plain(size) for key, size in zip(keys, found, strict=True)}

    def exists(self, key: str) -> bool:
        """Whether ``key`` exists."""
        try:
            return bool(self.fs.exists(self._fresh(self.path(key))))
        except Exception as e:
            raise self.failure("look up", key, e) from e

    def delete(self, keys: Iterable[str]) -> None:
        """Delete keys; keys already gone are ignored. A key the store refuses to delete raises
        ``StoreError`` naming it."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return
        try:
            refused = self.backend.delete([self.path(key) for key in keys])
        except Exception as e:
            raise self.failure("delete", keys[0], e) from e
        if refused:
            index, reason = min(refused)
            if len(refused) > 1:
                reason += f"; {len(refused) - 1} more key(s) were refused too"
            raise self.failure("delete", keys[index], PermissionError(reason))

    def check(self) -> None:
        """Raise ``StoreError`` unless the store can be used (a local folder is created)."""
        try:
            self.backend.check(self.root)
        except FileNotFoundError as e:
            if self.local:
                raise self.failure("reach", "", e) from e
            # An object-store prefix with nothing under it yet is fine; a missing bucket is not.
            bucket = self.root.split("/", 1)[0]
            if bucket and not self.root.startswith("/") and self.backend.bucket_missing(bucket, e):
                raise self.failure("reach", "", FileNotFoundError(f"bucket {bucket!r} does not exist")) from e
        except Exception as e:
            raise self.failure("reach", "", e) from e
