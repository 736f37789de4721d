"""One small interface over fsspec: write, read, list and delete keys under a store's root."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import sys
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import fsspec
import fsspec.asyn
import numpy as np
from fsspec.implementations.local import LocalFileSystem

from ..errors import StoreError
from . import conditions, credentials, layout, mapping, placeholders
from .credentials import redact

#: Blobs in flight at once when writing or reading many keys.
PARALLELISM = 8

#: Small objects (ledger records, roll-ups) in flight at once with ``small=True``: each is one
#: request on the backend's own event loop, so many cost little more than one (a cloud bucket's
#: latency is tens of milliseconds a request).
SMALL_PARALLELISM = 64

#: Buffers that blobs are read into start at a multiple of this, as torch's own CPU allocations
#: do, so arrays built on them are aligned as the originals were (vectorised kernels may round
#: differently on differently aligned data, and a model check must reproduce bit for bit).
ALIGNMENT = 64

#: Remote stores: bytes handed to (or taken from) a file object at once, and its part size.
#: The file object uploads a part whenever its buffer fills, so a large blob is never held
#: twice in memory: each blob in flight costs at most about one part and one chunk extra.
REMOTE_CHUNK = 8 << 20
REMOTE_BLOCK = 16 << 20  # S3 parts must be at least 5 MiB

#: Parts of one large remote object fetched at once, when its size is known: each a ranged GET
#: of ``REMOTE_BLOCK`` bytes, copied into place as it arrives (so at most this many parts of a
#: blob are held twice).
PARTS_IN_FLIGHT = 4

#: Keys per S3 batch delete (DeleteObjects takes at most 1000).
S3_DELETE_BATCH = 1000

Progress = Callable[[int], None]

#: Bytes read from a store: a buffer of their own, or a private mapping of a local file.
Buffer = memoryview


class _Counter:
    """Bytes done so far across worker threads, reported to an optional callback."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.total = 0
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        if self.progress is None:
            return
        with self.lock:
            self.total += n
            total = self.total
        self.progress(total)


def _buffer(size: int) -> memoryview:
    """A writable buffer of ``size`` bytes that starts at a multiple of ``ALIGNMENT``."""
    raw = np.empty(size + ALIGNMENT, dtype=np.uint8)
    start = -raw.__array_interface__["data"][0] % ALIGNMENT
    return memoryview(raw[start : start + size])


def _aligned_copy(data: bytes) -> memoryview:
    """``data`` in a buffer of its own (aligned and writable, as every buffer ``read`` returns)."""
    buf = _buffer(len(data))
    buf[:] = data
    return buf


def _read_remote(f: Any) -> memoryview:
    """All of a remote file into one buffer, a chunk at a time (no second whole copy)."""
    size = getattr(f, "size", None)
    if not isinstance(size, int):
        data = f.read()
        buf = _buffer(len(data))
        buf[:] = data
        return buf
    buf = _buffer(size)
    view, done = buf, 0
    while done < size:
        chunk = f.read(min(REMOTE_CHUNK, size - done))
        if not chunk:
            break
        view[done : done + len(chunk)] = chunk
        done += len(chunk)
    return buf if done == size else buf[:done]


@dataclass(frozen=True)
class Entry:
    """A key found in the store, with its size in bytes and modification time (epoch seconds)."""

    key: str
    size: int
    mtime: float | None


def _mtime(info: dict[str, Any]) -> float | None:
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


def _is_s3(fs: Any) -> bool:
    """Whether ``fs`` is s3fs's ``S3FileSystem`` (or a subclass; s3fs is imported already if so)."""
    cls = getattr(sys.modules.get("s3fs"), "S3FileSystem", None)
    return cls is not None and isinstance(fs, cls)


def _is_azure(fs: Any) -> bool:
    """Whether ``fs`` is adlfs's ``AzureBlobFileSystem`` (or a subclass)."""
    cls = getattr(sys.modules.get("adlfs"), "AzureBlobFileSystem", None)
    return cls is not None and isinstance(fs, cls)


def _s3_reply(error: BaseException) -> tuple[str | None, int | None]:
    """The error code and HTTP status of the S3 reply behind ``error``; ``(None, None)`` if no
    reply is (s3fs keeps botocore's ``ClientError``, which holds it, as the cause)."""
    seen: BaseException | None = error
    for _ in range(16):
        if seen is None:
            break
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            return response.get("Error", {}).get("Code"), response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        seen = seen.__cause__ or seen.__context__
    return None, None


class Store:
    """A folder of keys (``a/b/c``) on any filesystem fsspec opens.

    Writes are whole-object puts: object stores have no rename, so nothing here relies on one.
    On a local folder every write is flushed to disk (fsync) before it returns.
    """

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        if not url or not isinstance(url, str):
            raise StoreError("no store URL given: set JUPYTER_PAUSE_STORE or pass --store URL")
        url = placeholders.expand(url)
        self.url = url
        self.display_url = redact(url)
        self._secrets = credentials.secrets(url, storage_options or {})
        options = credentials.storage_options(url, storage_options or {})
        if "://" in url and not url.startswith(("file://", "local://")):
            # A new client per store, so credentials changed in the environment take effect.
            options.setdefault("skip_instance_cache", True)
        try:
            self.fs, root = fsspec.url_to_fs(url, **options)
        except (ImportError, ValueError, TypeError, OSError) as e:
            raise StoreError(
                f"cannot open store {self.display_url}: {self.scrub(str(e))}; check the URL "
                "scheme and install the fsspec backend it needs (s3fs for s3://, gcsfs for gs://)"
            ) from e
        self.root = root.rstrip("/")
        self.local = isinstance(self.fs, LocalFileSystem)

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

    def _fail(self, action: str, key: str, error: BaseException) -> StoreError:
        reason = self.scrub(str(error) or type(error).__name__)
        where = f"{key!r} in store {self.display_url}" if key else f"store {self.display_url}"
        return StoreError(
            f"cannot {action} {where}: {reason}; check that the store is reachable and writable, then try again"
        )

    def _fresh(self, path: str) -> str:
        """``path``, with what this client remembers of it and its folders forgotten.

        s3fs answers ``exists`` and the size of a file it opens from listings it made earlier,
        so a key another process wrote since would look absent (or keep its old size).
        """
        if not self.local:
            self.fs.invalidate_cache(path)
        return path

    def write(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Put ``data`` at ``key`` in one piece (durable on disk for local stores)."""
        path = self.path(key)
        try:
            if self.local:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            else:
                view = memoryview(data).cast("B")
                if len(view) <= REMOTE_BLOCK and _is_azure(self.fs):
                    # One request: adlfs's file object stages a block and commits it, two. (s3fs
                    # and gcsfs send a small file object's bytes in one request already.)
                    self.fs.pipe_file(path, bytes(view))
                    return
                with self.fs.open(path, "wb", block_size=REMOTE_BLOCK) as f:
                    for start in range(0, len(view), REMOTE_CHUNK):
                        f.write(view[start : start + REMOTE_CHUNK])
        except Exception as e:  # fsspec backends raise their own types; all mean the same here
            raise self._fail("write", key, e) from e

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
            raise self._fail("create", key, e) from e

    def _create(self, key: str, data: bytes) -> bool:
        """``create`` without looking first: what the store itself answers."""
        path = self.path(key)
        try:
            if self.local:
                folder, name = os.path.split(path)
                os.makedirs(folder, exist_ok=True)
                temporary = os.path.join(folder, f".{name}.{os.getpid()}-{threading.get_ident()}.part")
                try:
                    with open(temporary, "wb") as f:
                        f.write(data)
                        f.flush()
                        os.fsync(f.fileno())
                    os.link(temporary, path)
                finally:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(temporary)
                return True
            self.fs.pipe_file(self._fresh(path), bytes(data), mode="create")
            return True
        except FileExistsError:
            return False
        except OSError as e:
            if conditions.precondition_failed(e):
                return False
            raise

    @functools.cached_property
    def atomic_create(self) -> bool:
        """Whether ``create`` is a true create-if-absent here: of two racing creates, one fails.

        True for a local folder (``os.link``). For S3, GCS and Azure (``conditions.CONDITIONAL_BACKENDS``) a probe
        decides, once per ``Store``: a private key is created twice and the second create must
        be refused by the server itself, not by looking first; a server that ignores the
        condition overwrites, and a server that rejects conditional puts fails the first. False
        for every other backend. Raises ``StoreError`` when the store cannot be written at all.
        """
        if self.local:
            return True
        if not conditions.sends_conditions(self.fs):
            return False
        key = layout.probe_key(secrets.token_hex(16))
        try:
            try:
                first = self._create(key, b"first")
            except Exception:  # refused: by any error, as long as a plain write then works
                self.write(key, b"first")  # the store takes plain writes: it refused the condition
                return False
            second = self._create(key, b"second")
            return first and not second and bytes(self.read(key)) == b"first"
        except StoreError:
            raise
        except Exception as e:
            raise self._fail("probe", key, e) from e
        finally:
            self.delete([key])

    def read(self, key: str, mapped: bool = False, size: int | None = None) -> Buffer:
        """The bytes at ``key`` (a writable buffer, so arrays can be built on it without a copy).

        With ``mapped``, a large local file comes back as a private mapping of it (see
        ``mapping``): no copy is made, and pages are copied only where they are written to.
        ``size``, when the caller knows it (a blob's size is in its manifest): a remote object
        of at most ``REMOTE_BLOCK`` bytes is then fetched whole in one request, with no request
        for its size first.
        """
        path = self.path(key)
        try:
            if self.local and mapped:
                view = mapping.map_file(path)
                if view is not None:
                    return view
            if self.local:
                size = os.path.getsize(path)
                buf = _buffer(size)
                with open(path, "rb", buffering=0) as f:
                    view, done = buf, 0
                    while done < size:
                        n = f.readinto(view[done:])
                        if not n:
                            break
                        done += n
                return buf if done == size else buf[:done]
            # A blob never changes once written (its key is its digest): what a listing said of
            # it stays true, which saves a request per blob. Any other key may have been rewritten.
            fresh = path if layout.blob_digest(key) else self._fresh(path)
            whole = {"max_concurrency": 1} if _is_s3(self.fs) else {}  # s3fs: no HEAD to split it
            if size is not None and size <= REMOTE_BLOCK:
                return _aligned_copy(self.fs.cat_file(fresh, **whole))
            if size is not None and getattr(self.fs, "async_impl", False):
                parts = self._read_parts(fresh, size, whole)
                if parts is not None:
                    return parts
            with self.fs.open(fresh, "rb", block_size=REMOTE_BLOCK, cache_type="none") as f:
                return _read_remote(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"{key} not found in store {self.display_url}") from None
        except Exception as e:
            raise self._fail("read", key, e) from e

    def _read_parts(self, path: str, size: int, options: dict[str, Any]) -> Buffer | None:
        """A remote object of ``size`` bytes, ``PARTS_IN_FLIGHT`` ranged GETs at a time on the
        backend's event loop, each part copied into one aligned buffer as it arrives; None when
        a part comes back short or cannot be had (the object is not the size it should be, or a
        request failed: the plain read says which)."""
        buf, fs = _buffer(size), self.fs

        async def gather() -> list[bool]:
            gate = asyncio.Semaphore(PARTS_IN_FLIGHT)

            async def one(start: int) -> bool:
                end = min(start + REMOTE_BLOCK, size)
                async with gate:
                    data = await fs._cat_file(path, start=start, end=end, **options)
                buf[start : start + len(data)] = data if len(data) <= end - start else data[: end - start]
                return len(data) == end - start

            return await asyncio.gather(*(one(start) for start in range(0, size, REMOTE_BLOCK)))

        try:
            return buf if all(fsspec.asyn.sync(fs.loop, gather)) else None
        except FileNotFoundError:
            raise
        except Exception:  # a range past its end (it is shorter than it should be): read it plainly
            return None

    def read_many(
        self,
        keys: Iterable[str],
        progress: Progress | None = None,
        then: Callable[[str, Buffer], Any] | None = None,
        mapped: bool = False,
        small: bool = False,
        sizes: dict[str, int] | None = None,
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
        """
        done = _Counter(progress)
        if small and not self.local and getattr(self.fs, "async_impl", False):
            return self._read_small(list(dict.fromkeys(keys)), done, then)

        def one(key: str) -> Any:
            try:
                data = self.read(key, mapped, None if sizes is None else sizes.get(key))
            except (FileNotFoundError, StoreError) as e:
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

    def _read_small(self, keys: list[str], done: _Counter, then: Callable[[str, Buffer], Any] | None) -> dict[str, Any]:
        """``read_many(small=True)`` on an async backend: one whole-object GET a key, gathered."""
        fs = self.fs
        whole = {"max_concurrency": 1} if _is_s3(fs) else {}  # s3fs: no HEAD to decide on ranged parts

        def finish(key: str, data: Any) -> Any:
            if isinstance(data, FileNotFoundError):
                return FileNotFoundError(f"{key} not found in store {self.display_url}")
            if isinstance(data, BaseException):
                return self._fail("read", key, data)
            view = memoryview(bytes(data))
            done.add(len(view))
            if then is None:
                return view
            try:
                return then(key, view)
            except Exception as e:
                return e

        async def gather() -> list[Any]:
            gate = asyncio.Semaphore(SMALL_PARALLELISM)

            async def one(key: str) -> Any:
                async with gate:
                    try:
                        return await fs._cat_file(self._fresh(self.path(key)), **whole)
                    except Exception as e:  # each key's failure is its own, as in read_many
                        return e

            return await asyncio.gather(*(one(key) for key in keys))

        found = fsspec.asyn.sync(fs.loop, gather)
        return {key: finish(key, data) for key, data in zip(keys, found, strict=True)}

    def write_many(
        self, items: dict[str, bytes | bytearray | memoryview], progress: Progress | None = None, small: bool = False
    ) -> None:
        """Write keys in parallel; the first failure is raised once all writes have stopped.

        ``progress(bytes_done)`` is called as each key is written. ``small``: as for
        ``read_many``, each a single PUT gathered on the backend's event loop (remote async
        stores; elsewhere the same as without).
        """
        done = _Counter(progress)
        if small and not self.local and getattr(self.fs, "async_impl", False) and items:
            self._write_small(items, done)
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

    def _write_small(self, items: dict[str, bytes | bytearray | memoryview], done: _Counter) -> None:
        """``write_many(small=True)`` on an async backend: one PUT a key, gathered; the first
        failure raised once all have stopped."""
        fs = self.fs

        async def gather() -> list[Any]:
            gate = asyncio.Semaphore(SMALL_PARALLELISM)

            async def one(key: str, data: bytes | bytearray | memoryview) -> Any:
                async with gate:
                    try:
                        await fs._pipe_file(self._fresh(self.path(key)), bytes(data))
                    except Exception as e:
                        return e
                    done.add(len(data))
                    return None

            return await asyncio.gather(*(one(key, data) for key, data in items.items()))

        for key, error in zip(items, fsspec.asyn.sync(fs.loop, gather), strict=True):
            if error is not None:
                raise self._fail("write", key, error) from error

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
            raise self._fail("list", prefix, e) from e
        root = self.root.strip("/")
        entries = {}
        for path, info in found.items():
            if info.get("type") == "directory":
                continue
            path = path.strip("/")
            key = path[len(root) + 1 :] if root else path
            entries[key] = Entry(key, int(info.get("size") or 0), _mtime(info))
        return entries

    def exists(self, key: str) -> bool:
        """Whether ``key`` exists."""
        try:
            return bool(self.fs.exists(self._fresh(self.path(key))))
        except Exception as e:
            raise self._fail("look up", key, e) from e

    def delete(self, keys: Iterable[str]) -> None:
        """Delete keys; keys already gone are ignored. A key the store refuses to delete raises
        ``StoreError`` naming it."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return
        if _is_s3(self.fs):
            self._delete_s3(keys)
            return
        paths = [self.path(key) for key in keys]
        try:
            self.fs.rm(paths)
        except FileNotFoundError:
            for path in paths:
                try:
                    self.fs.rm(path)
                except FileNotFoundError:
                    continue
        except Exception as e:
            raise self._fail("delete", keys[0], e) from e

    def _delete_s3(self, keys: list[str]) -> None:
        """``delete`` on S3: batch deletes (DeleteObjects), whose per-key refusals are raised.

        A batch delete answers 200 whatever became of each key, and lists the keys it did not
        delete, with why, in the reply's ``Errors``; s3fs's ``rm`` drops that list, so a refused
        delete (``AccessDenied``: a key scoped to another prefix, a bucket policy, object lock)
        would pass for done. S3 deletes a key that is not there without error, and a bucket that
        is not there holds nothing to delete: both stay silent, as on every other backend.
        """
        names: dict[str, str] = {}  # S3 object key -> store key
        bucket = ""
        for key in keys:
            bucket, name, _ = self.fs.split_path(self.path(key))
            names[name] = key
        batch_names = list(names)
        refused: list[tuple[str, dict[str, Any]]] = []
        try:
            for start in range(0, len(batch_names), S3_DELETE_BATCH):
                batch = batch_names[start : start + S3_DELETE_BATCH]
                objects = {"Objects": [{"Key": name} for name in batch], "Quiet": True}
                try:
                    reply = self.fs.call_s3("delete_objects", Bucket=bucket, Delete=objects)
                except FileNotFoundError:  # NoSuchBucket: nothing there to delete
                    return
                finally:
                    for name in batch:  # forget what this client listed of these keys before
                        self.fs.invalidate_cache(f"{bucket}/{name}")
                for error in reply.get("Errors") or []:
                    if error.get("Code") != "NoSuchKey":
                        refused.append((names.get(error.get("Key"), names[batch[0]]), error))
        except Exception as e:
            raise self._fail("delete", keys[0], e) from e
        if refused:
            order = {key: i for i, key in enumerate(keys)}
            key, error = min(refused, key=lambda item: order[item[0]])
            reason = f"{error.get('Message') or 'refused'} ({error.get('Code') or 'no error code'})"
            if len(refused) > 1:
                reason += f"; {len(refused) - 1} more key(s) were refused too"
            raise self._fail("delete", key, PermissionError(reason))

    def check(self) -> None:
        """Raise ``StoreError`` unless the store can be used (a local folder is created)."""
        try:
            if self.local:
                os.makedirs(self.root, exist_ok=True)
                if not os.access(self.root, os.W_OK | os.X_OK):
                    raise PermissionError(f"no write permission on {self.root}")
                return
            self.fs.ls(self.root or "", detail=False)
        except FileNotFoundError as e:
            if self.local:
                raise self._fail("reach", "", e) from e
            # An object-store prefix with nothing under it yet is fine; a missing bucket is not.
            bucket = self.root.split("/", 1)[0]
            if bucket and not self.root.startswith("/") and self._bucket_missing(bucket, e):
                raise self._fail("reach", "", FileNotFoundError(f"bucket {bucket!r} does not exist")) from e
        except Exception as e:
            raise self._fail("reach", "", e) from e

    def _bucket_missing(self, bucket: str, error: FileNotFoundError) -> bool:
        """Whether listing the root raised ``error`` because ``bucket`` does not exist, rather than
        because nothing is under the root yet.

        An S3 listing answered 404 (``NoSuchBucket``) names a missing bucket: listing a prefix
        with nothing under it is no error on S3. s3fs raises a ``FileNotFoundError`` of its own,
        with no reply behind it, when its listing worked and found nothing: an empty prefix.
        The bucket itself is not asked about: a key confined to a prefix (an IAM policy on
        ``s3:prefix``, a SeaweedFS ``Read:bucket/prefix/*`` action) may list its prefix but not
        look at the bucket (``HeadBucket`` is refused), which s3fs's ``exists`` takes for absent.
        Other backends are asked whether the bucket exists; a refusal counts as present.
        """
        code, status = _s3_reply(error)
        if code is not None or status is not None:
            return code == "NoSuchBucket" or status == 404
        if _is_s3(self.fs):
            return False
        try:
            return not self.fs.exists(bucket)
        except PermissionError:
            return False
