"""Fetching a checkpoint's blobs onto this node as soon as its resume is asked for.

A resume from a remote store used to read nothing until its kernel had started (and, before
that, until the resources it waits for were there), then read everything. Now the server starts
copying the checkpoint's pool blobs into the node's prefetch folder (``store.prefetched``) the
moment Resume is clicked: while the resume waits for a GPU, and while its kernel starts. The
kernel's restore begins as soon as the kernel answers, whatever is still arriving: it reads what
is here, mapped as from a local store, and waits for the rest, which the server claimed as it
began and copies in the order the restore reads (the claims of ``store.prefetched``); so the
kernel opens no store client at all, unless a copy fails and it reads that object itself. It verifies every
byte against the signed manifest as it would from the store (the copies are the stored bytes,
ciphertext where the store is encrypted). The copies are removed once the resume has read them and when it fails;
each server has a folder of its own (``claim``), and the folder of one that stopped is removed
when the next one starts.

The copies go to the node's shared memory (``PauseConfig.prefetch_memory_dir``) where they fit
there and twice over in the memory left (the kernel reads them into memory of its own): on a
2-core VM, writing a gigabyte into the disk's page cache cost 1.5-5.7 CPU-seconds, into shared
memory 0.35-0.5, and a click's resume of 1 GB from S3 went from 5.1-5.6 s to 4.4-4.7 s. Else they
go to the disk, where a prefetch takes only what it can spare: its bytes, and those of every
prefetch still running here, must leave a share of the disk free
(``PauseConfig.prefetch_keep_free``); else the resume reads from the store as before, and its
status says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .. import units
from ..store import layout, memory, readahead
from ..store.manifest import Manifest
from ..store.prefetched import running
from ..store.storage import PARALLELISM, Store

log = logging.getLogger(__name__)

#: Seconds between a resume's status updates while the copying goes on.
SHOW_EVERY = 1.0

_lock = threading.Lock()
#: Bytes promised to prefetches running in this process (in shared memory or not), and how many
#: of them hold each key.
_reserved: dict[int, tuple[bool, int]] = {}
_holders: dict[str, int] = {}


def _promised(in_memory: bool) -> int:
    """Bytes promised to running prefetches in shared memory, or on disk (under ``_lock``)."""
    return sum(size for kept, size in _reserved.values() if kept is in_memory)


class Prefetch:
    """The copying of one checkpoint's pool blobs from a remote store onto this node."""

    #: The blobs are being copied onto the node: the kernel reads them there.
    copies = True

    def __init__(self, store: Store, manifest: Manifest) -> None:
        assert store.prefetched is not None, "a prefetch needs the store's prefetch folder"
        self.store, self.folder = store, store.prefetched
        keys = manifest.blob_keys(manifest.blobs, store.names)
        order = {digest: i for i, digest in enumerate(manifest.needed())}
        ahead = sorted(keys, key=lambda key: order.get(keys[key], len(order)))  # as the restore reads them
        self.keys = [key for key in ahead if layout.pool_digest(key) and self.folder.find(key) is None]
        self.total = self.done = 0
        #: Bytes the resume's kernel claimed first and read from the store itself.
        self.kernel_bytes = 0
        self.started = time.monotonic()
        self.elapsed: float | None = None
        #: Why nothing (or not everything) was prefetched; "" when all went well.
        self.why = ""
        #: Whether the copies go to shared memory (else to the folder's disk).
        self.in_memory = False
        self._sizes: dict[str, int] = {}
        self._held: list[str] = []  # the keys this prefetch may copy, counted in ``_holders``
        self._claims: set[str] = set()  # the keys it claimed and has not given up yet
        self._stop = threading.Event()
        self.finished = threading.Event()

    def start(self) -> Prefetch:
        """Begin copying in a thread of its own (``finished`` is set when it ends)."""
        threading.Thread(target=self._run, name="jupyter-pause-prefetch", daemon=True).start()
        return self

    def _run(self) -> None:
        try:
            found = self.store.backend.sizes([self.store.path(key) for key in self.keys])
            self._sizes = {key: size for key, size in zip(self.keys, found, strict=True) if size is not None}
            self.total = sum(self._sizes.values())
            self.why = self._room()
            if not self.why:
                mine = self._claimed()
                try:
                    with ThreadPoolExecutor(PARALLELISM, thread_name_prefix="jupyter-pause-prefetch") as pool:
                        list(pool.map(self._copy, mine))
                finally:  # a copy that failed cancels those not begun: their claims are given up too
                    self._release(list(self._claims))
        except Exception as e:  # the kernel reads what is missing from the store: nothing is lost
            self.why = f"prefetch stopped: {self.store.scrub(str(e)) or type(e).__name__}"
        finally:
            self.elapsed = time.monotonic() - self.started
            with _lock:
                _reserved.pop(id(self), None)
            self.finished.set()

    def _room(self) -> str:
        """Reserve this prefetch's bytes in shared memory where they fit there, else on the
        folder's disk; why not, where they fit in neither."""
        keep = self.folder.keep_free
        with _lock:
            self.in_memory = self._fits_memory(keep)
            if not self.in_memory:
                self.folder.root.mkdir(parents=True, exist_ok=True, mode=0o700)
                disk = shutil.disk_usage(self.folder.root)
                others = _promised(in_memory=False)
                if self.total > disk.free - others - int(keep * disk.total):
                    return (
                        f"not prefetched: {units.size(self.total)} would leave less than {keep:.0%} of "
                        f"{self.folder.root} free ({units.size(disk.free)} free, {units.size(others)} promised to "
                        "other resumes); free space there or lower PauseConfig.prefetch_keep_free"
                    )
            _reserved[id(self)] = (self.in_memory, self.total)
            self._held = list(self._sizes)
            for key in self._held:
                _holders[key] = _holders.get(key, 0) + 1
        return ""

    def _fits_memory(self, keep: float) -> bool:
        """Whether the copies fit in the node's shared memory, leaving ``keep`` of it free, and
        twice over in ``1 - keep`` of the memory this process can still take: the kernel reads
        them into memory of its own before they are removed."""
        folder = self.folder.memory
        if folder is None:
            return False
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            room = shutil.disk_usage(folder)
        except OSError:
            return False
        others = _promised(in_memory=True)
        fits = self.total + others <= room.free - int(keep * room.total)
        return fits and 2 * self.total + others <= (1 - keep) * memory.available()

    def _claimed(self) -> list[str]:
        """Claim every object to copy at once, in the restore's order: the resume's kernel then
        waits for these copies instead of reading the store beside them (it needs no store
        client then: on two cores a 1 GB click to next cell took 0.2 s less). Those claimed first
        by the kernel are its to read."""
        mine: list[str] = []
        try:
            for key in self._sizes:
                if self.folder.claim(key):
                    mine.append(key)
        except BaseException:  # a folder that fills up: nothing is left claimed, the kernel reads it all
            for key in mine:
                self.folder.release(key)
            raise
        with _lock:
            self.kernel_bytes = self.total - sum(self._sizes[key] for key in mine)
            self._claims = set(mine)
        return mine

    def _release(self, keys: list[str]) -> None:
        """Give up the claims on ``keys`` (copied, failed, or never begun)."""
        for key in keys:
            with _lock:
                self._claims.discard(key)
            self.folder.release(key)

    def _copy(self, key: str) -> None:
        try:
            if self._stop.is_set():
                return
            data = self.store.backend.copy_of(self.store.path(key), self._sizes[key])
            if len(data) != self._sizes[key]:
                raise OSError(f"{key} came back with {len(data)} bytes, not {self._sizes[key]}")
            self.folder.put(key, data, self.in_memory)
        finally:
            self._release([key])
        with _lock:
            self.done += len(data)

    def progress(self) -> dict[str, float]:
        """Bytes copied, of how many, at what rate (bytes a second), and how many the resume's
        kernel read from the store itself, for the status."""
        seconds = self.elapsed if self.elapsed is not None else time.monotonic() - self.started
        rate = self.done / seconds if seconds > 0 else 0.0
        return {"bytes": self.done, "total": self.total, "rate": rate, "kernel_bytes": self.kernel_bytes}

    def said(self) -> str:
        """The prefetch in a few words, for a status detail."""
        if self.why:
            return self.why
        done = "prefetched" if self.finished.is_set() else "prefetching"
        rate = self.progress()["rate"]
        place = " into shared memory" if self.in_memory else ""
        said = f"{done} {units.size(self.done)} of {units.size(self.total)}{place} ({units.size(int(rate))}/s)"
        return f"{said}, the kernel reading {units.size(self.kernel_bytes)} itself" if self.kernel_bytes else said

    def after(self, text: str) -> str:
        """``text`` followed by the prefetch in a few words."""
        return "; ".join(filter(None, [text, self.said()]))

    def read_ahead(self) -> None:
        """Nothing more to start: the copying began with the resume (``start``)."""

    def discard(self) -> None:
        """Stop copying and remove the copies no other running prefetch holds."""
        self._stop.set()
        self.finished.wait()
        with _lock:
            gone = []
            for key in self._held:
                held = _holders.pop(key, 1) - 1
                if held > 0:
                    _holders[key] = held
                else:
                    gone.append(key)
            self._held = []
        self.folder.drop(gone)


class NoPrefetch:
    """What a resume has where there is nothing to prefetch: a local store, or prefetching off."""

    copies = False

    def __init__(self) -> None:
        self.finished = threading.Event()
        self.finished.set()

    def progress(self) -> dict[str, float]:
        return {}

    def said(self) -> str:
        return ""

    def after(self, text: str) -> str:
        return text

    def discard(self) -> None:
        return None

    def read_ahead(self) -> None:
        """Nothing is read ahead of the kernel here (``Readahead`` reads a local store's files)."""


class Readahead(NoPrefetch):
    """A local store's checkpoint, read in place: nothing to copy, but its blob files are read
    into the page cache (``store.readahead``) once the resume waits or its kernel has answered
    (``read_ahead``), so that the kernel maps them without waiting on the disk. Not sooner: a new
    kernel's start reads its own files from the disk, and a click whose kernel started beside
    that read took 5-10% longer until its next cell ran."""

    def __init__(self, store: Store, manifest: Manifest) -> None:
        super().__init__()
        self.paths = readahead.blob_paths(store, manifest, manifest.blobs)
        self._size = sum(manifest.blobs.values())
        #: The thread asking for the readahead; None before ``read_ahead``, and where the
        #: checkpoint is not read ahead.
        self.advising: threading.Thread | None = None
        self._asked = False

    def read_ahead(self) -> None:
        """Start reading the files into the page cache, once."""
        if not self._asked:
            self._asked = True
            self.advising = readahead.advise(self.paths, self._size)


@contextlib.asynccontextmanager
async def showing(fetching: Prefetch | NoPrefetch, show: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
    """While the block runs, ``show()`` the copying's progress every ``SHOW_EVERY`` seconds until
    it ends; never once the block is done (a later status is not overwritten)."""
    done = asyncio.Event()

    async def every() -> None:
        while not fetching.finished.is_set():
            try:
                await asyncio.wait_for(done.wait(), SHOW_EVERY)
                return
            except asyncio.TimeoutError:
                await show()

    task = asyncio.ensure_future(every())
    try:
        yield
    finally:
        done.set()
        await task


def begin(store: Store, manifest: Manifest) -> Prefetch | NoPrefetch:
    """Start prefetching ``manifest``'s blobs from ``store``: copies onto this node from a remote
    store, the page cache from a local one (``Readahead``); nothing with prefetching switched off
    (``NoPrefetch``)."""
    if store.local:
        return Readahead(store, manifest)
    if store.prefetched is None:
        return NoPrefetch()
    return Prefetch(store, manifest).start()


def claim(config: Any) -> None:
    """Give this server prefetch folders of its own under ``config.prefetch_dir`` and
    ``config.prefetch_memory_dir`` (its kernels are handed them), and remove the folders of
    servers no longer running there (one that stopped mid-resume leaves its copies behind).

    Shared memory is one folder for every user of the node: this user's is used only where it is
    theirs alone (created here, or found owned by them and closed to others); else copies go to
    the disk, and the log says why.
    """
    if not config.prefetch_dir:
        config.prefetch_memory_dir = ""  # prefetching is off
        return
    config.prefetch_dir = _own_folder(Path(config.prefetch_dir))
    if config.prefetch_memory_dir:
        why = _private(Path(config.prefetch_memory_dir))
        if why:
            log.warning("jupyter-pause: prefetched checkpoints go to disk, not shared memory: %s", why)
            config.prefetch_memory_dir = ""
        else:
            config.prefetch_memory_dir = _own_folder(Path(config.prefetch_memory_dir))


def _own_folder(root: Path) -> str:
    """This server's folder under ``root``; those of servers that stopped, removed."""
    for folder in root.glob("server-*"):
        pid = folder.name.removeprefix("server-")
        if not pid.isdigit() or int(pid) == os.getpid() or not running(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
    return str(root / f"server-{os.getpid()}")


def _private(folder: Path) -> str:
    """Why ``folder`` cannot hold this user's copies ("" where it can): it must be a folder of
    theirs that no one else may open. Created (mode 0700) where missing."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = os.lstat(folder)
    except OSError as e:
        return f"{folder} cannot be made: {e.strerror or e}"
    if not stat.S_ISDIR(found.st_mode):
        return f"{folder} is not a folder"
    if hasattr(os, "getuid") and found.st_uid != os.getuid():
        return f"{folder} belongs to another user (uid {found.st_uid})"
    if found.st_mode & 0o077:
        return f"{folder} is open to other users (mode {stat.S_IMODE(found.st_mode):o}); make it 0700"
    return ""
