"""The backend of any object store fsspec opens: whole-object puts and gets through fsspec."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fsspec.asyn

from ..buffers import REMOTE_BLOCK, REMOTE_CHUNK, Buffer, aligned_copy, buffer, read_remote

#: Parts of one large remote object fetched at once, when its size is known: each a ranged GET
#: of ``REMOTE_BLOCK`` bytes, copied into place as it arrives (so at most this many parts of a
#: blob are held twice).
PARTS_IN_FLIGHT = 4

#: Small objects (ledger records, roll-ups) in flight at once: each is one request on the
#: backend's own event loop, so many cost little more than one (a cloud bucket's latency is tens
#: of milliseconds a request).
SMALL_PARALLELISM = 64


class Backend:
    """An object store through fsspec: no rename, no partial writes, listings that may be cached.

    Paths are the filesystem's (``bucket/prefix/key``); ``Store`` turns keys into paths and each
    failure into an error that names the key and says what to do.
    """

    #: What the backend is called in messages and decisions.
    name = "object store"
    #: A local filesystem: durable writes, atomic links, mapped reads.
    local = False
    #: Whether the store lists writes begun and never completed (see ``store.uploads``).
    lists_uploads = False
    #: Options of a GET of a whole object.
    whole: dict[str, Any] = {}

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    @property
    def asynchronous(self) -> bool:
        """Whether the filesystem runs requests on an event loop of its own (s3fs, gcsfs, adlfs)."""
        return bool(getattr(self.fs, "async_impl", False))

    def fresh(self, path: str) -> str:
        """``path``, with what this client remembers of it and its folders forgotten.

        s3fs answers ``exists`` and the size of a file it opens from listings it made earlier,
        so a key another process wrote since would look absent (or keep its old size).
        """
        self.fs.invalidate_cache(path)
        return path

    def write(self, path: str, view: memoryview) -> None:
        """Put the bytes of ``view`` at ``path``, a part at a time through a file object (which
        uploads a part whenever its buffer fills)."""
        with self.fs.open(path, "wb", block_size=REMOTE_BLOCK) as f:
            for start in range(0, len(view), REMOTE_CHUNK):
                f.write(view[start : start + REMOTE_CHUNK])

    def write_whole(self, path: str, view: memoryview) -> None:
        """Put ``view`` at ``path`` so that no reader ever sees it part-written, even while
        another writer puts the same bytes there: an object store's put is whole already."""
        self.write(path, view)

    def write_stream(self, path: str, chunks: Iterable[bytes], keep: Callable[[], bool]) -> None:
        """Put the bytes of ``chunks`` at ``path``, a part at a time, for a file too large to
        hold in memory; when ``keep()`` then answers False, the object is removed again."""
        with self.fs.open(path, "wb", block_size=REMOTE_BLOCK) as f:
            for chunk in chunks:
                f.write(chunk)
        if not keep():
            self.fs.rm(path)

    def sizes(self, paths: list[str]) -> list[int | None]:
        """The size of the object at each of ``paths``, None where there is none: one request a
        path, ``SMALL_PARALLELISM`` at once (on the backend's event loop where it has one)."""
        if not self.asynchronous:
            if len(paths) <= 1:  # a writer's look-up of one blob: no pool of threads for it
                return [self._size_of(path) for path in paths]
            with ThreadPoolExecutor(SMALL_PARALLELISM) as pool:
                return list(pool.map(self._size_of, paths))

        async def gather() -> list[int | None]:
            gate = asyncio.Semaphore(SMALL_PARALLELISM)

            async def one(path: str) -> int | None:
                async with gate:
                    return await self._size(path)

            return await asyncio.gather(*(one(path) for path in paths))

        return fsspec.asyn.sync(self.fs.loop, gather)

    def _size_of(self, path: str) -> int | None:
        try:
            info = self.fs.info(path)
        except FileNotFoundError:
            return None
        return None if info.get("type") == "directory" else int(info.get("size") or 0)

    async def _size(self, path: str) -> int | None:
        """The size of one object, asked on the event loop; None where there is none."""
        try:
            info = await self.fs._info(path)
        except FileNotFoundError:
            return None
        return None if info.get("type") == "directory" else int(info.get("size") or 0)

    def create(self, path: str, data: bytes) -> None:
        """Put ``data`` at ``path`` in one request, only if nothing is there (fsspec's exclusive
        mode: ``FileExistsError``, or the server's refusal, when something is)."""
        self.fs.pipe_file(self.fresh(path), bytes(data), mode="create")

    def read(self, path: str, size: int | None, unchanging: bool, mapped: bool = False) -> Buffer:
        """The bytes at ``path``; ``size`` where known (one GET for an object of one part, ranged
        parts in parallel for a larger one); ``unchanging``: the object never changes once
        written (a blob, whose key is its digest), so what a listing said of it stays true.
        ``mapped``: a private mapping where the backend can make one (a local file)."""
        fresh = path if unchanging else self.fresh(path)
        if size is not None and size <= REMOTE_BLOCK:
            return aligned_copy(self.fs.cat_file(fresh, **self.whole))
        if size is not None and self.asynchronous:
            parts = self._read_parts(fresh, size)
            if parts is not None:
                return parts
        with self.fs.open(fresh, "rb", block_size=REMOTE_BLOCK, cache_type="none") as f:
            return read_remote(f)

    def copy_of(self, path: str, size: int) -> bytes | Buffer:
        """The bytes of the blob at ``path`` (``size`` bytes), to be written elsewhere: as the
        store's client gives them where one GET fetches it, with no aligned copy of its own (a
        prefetch writes them to disk as they come: that copy cost a third of its time)."""
        if size <= REMOTE_BLOCK:
            return self.fs.cat_file(path, **self.whole)
        return self.read(path, size, True)

    def _read_parts(self, path: str, size: int) -> Buffer | None:
        """A remote object of ``size`` bytes, ``PARTS_IN_FLIGHT`` ranged GETs at a time on the
        backend's event loop, each part copied into one aligned buffer as it arrives; None when
        a part comes back short or cannot be had (the object is not the size it should be, or a
        request failed: the plain read says which)."""
        buf, fs, options = buffer(size), self.fs, self.whole

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

    def read_small(self, paths: list[str]) -> list[Any]:
        """Small objects, one whole-object GET each, ``SMALL_PARALLELISM`` at once on the
        backend's event loop: for each path its bytes, or the exception reading it raised."""
        fs, whole = self.fs, self.whole

        async def gather() -> list[Any]:
            gate = asyncio.Semaphore(SMALL_PARALLELISM)

            async def one(path: str) -> Any:
                async with gate:
                    try:
                        return await fs._cat_file(self.fresh(path), **whole)
                    except Exception as e:  # each key's failure is its own
                        return e

            return await asyncio.gather(*(one(path) for path in paths))

        return fsspec.asyn.sync(fs.loop, gather)

    def write_small(self, items: dict[str, bytes | bytearray | memoryview]) -> list[BaseException | None]:
        """Small objects, one PUT each, gathered on the backend's event loop: for each path None,
        or the exception writing it raised."""
        fs = self.fs

        async def gather() -> list[Any]:
            gate = asyncio.Semaphore(SMALL_PARALLELISM)

            async def one(path: str, data: bytes | bytearray | memoryview) -> Any:
                async with gate:
                    try:
                        await fs._pipe_file(self.fresh(path), bytes(data))
                    except Exception as e:
                        return e
                    return None

            return await asyncio.gather(*(one(path, data) for path, data in items.items()))

        return fsspec.asyn.sync(fs.loop, gather)

    def delete(self, paths: list[str]) -> list[tuple[int, str]]:
        """Delete ``paths``; those already gone are ignored. Returns the refusals the store
        answered without raising, as (index in ``paths``, why): none here."""
        try:
            self.fs.rm(paths)
        except FileNotFoundError:
            for path in paths:
                try:
                    self.fs.rm(path)
                except FileNotFoundError:
                    continue
        return []

    def check(self, root: str) -> None:
        """Raise unless ``root`` can be listed (``FileNotFoundError`` for nothing there)."""
        self.fs.ls(root or "", detail=False)

    def bucket_missing(self, bucket: str, error: FileNotFoundError) -> bool:
        """Whether listing the root raised ``error`` because ``bucket`` does not exist, rather
        than because nothing is under the root yet: the bucket is asked about; a refusal counts
        as present."""
        try:
            return not self.fs.exists(bucket)
        except PermissionError:
            return False
