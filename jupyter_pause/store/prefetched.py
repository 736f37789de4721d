"""Node-local copies of a store's pool objects, fetched ahead of a resume (``server.prefetch``).

A resume on a new node reads its checkpoint's blobs from a remote store. The server fetches them
as soon as Resume is clicked, while the resume waits for a GPU and while its kernel starts, into
a folder on this node (``Prefetched``): the objects' bytes as the store holds them (ciphertext
where the store is encrypted), under their keys, in the node's shared memory where the checkpoint
fits there, else on its disk. A kernel's ``Store`` reads a pool blob from there
when it is there (mapping a copy on disk as it maps a local store's file, reading one in shared
memory into memory of its own: ``Prefetched.mappable``), and verifies it exactly as it verifies
what it reads from the store: the folder is a faster place to read from, never a reason
to trust. Only pool blobs go there: named by (a keyed HMAC of) their digest, they never change.

One folder per store URL (``for_store``), so the server and the kernels it starts, configured
alike, find the same one. A copy appears whole or not at all (written under a temporary name,
then renamed).

The server's copying and the kernel's reading overlap: the kernel starts its restore as soon as it
answers, with the rest of the checkpoint still arriving. Each object is read from the store once,
by whoever claims it first (``claim``: a file created exclusively beside the copy, holding the
claimant's process id). The server claims every object it is to copy as it starts, and copies
them in the order the restore reads them; the kernel waits for each copy (``arriving``), reads
the store after all where the copy never comes (the server stopped, or its read failed), and
reads from the store itself what nobody claimed (no prefetch, or one with no room).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from . import layout

#: Share of the prefetch folder's disk that every prefetch running on a node leaves free, by default.
KEEP_FREE = 0.10
#: Seconds between looks at an object another process is copying here.
ARRIVAL_POLL = 0.005
#: Seconds a reader waits for such a copy before it reads the store itself.
ARRIVAL_TIMEOUT = 120.0


class Prefetched:
    """The folder of one store's prefetched pool objects on this node: on its disk, and in its
    shared memory where a checkpoint fits there (``memory``).

    A copy in shared memory is read into the reader's own memory rather than mapped
    (``mappable``): a mapping of it would hold the copy in memory for as long as the arrays built
    on it live, and every page written to would then be held twice. A copy on disk is mapped: its
    pages are the page cache's, let go whenever memory is short.
    """

    def __init__(self, root: str, keep_free: float = KEEP_FREE, memory: str = "") -> None:
        #: On disk: the claims, and the copies that are not in shared memory.
        self.root = Path(root)
        #: In shared memory (``/dev/shm``): the copies of checkpoints that fit there; None: none.
        self.memory = Path(memory) if memory else None
        #: Share of the folder's disk the prefetches copying into it leave free (``server.prefetch``).
        self.keep_free = keep_free

    @property
    def roots(self) -> list[Path]:
        """Where copies may be: shared memory first, where there is a folder there, then disk."""
        return [self.root] if self.memory is None else [self.memory, self.root]

    def path(self, key: str, in_memory: bool = False) -> Path:
        """Where the copy of ``key`` is (or would be): in shared memory, or on disk."""
        return self.roots[0] / key if in_memory else self.root / key

    def find(self, key: str) -> str | None:
        """The copy of pool object ``key`` on this node, or None (none, or not a pool object)."""
        if not layout.pool_digest(key):
            return None
        return next((str(root / key) for root in self.roots if (root / key).is_file()), None)

    def mappable(self, copy: str) -> bool:
        """Whether the copy at ``copy`` (as ``find`` gives it) is best mapped rather than read:
        one on disk is, one in shared memory is not (see the class)."""
        return self.memory is None or self.memory not in Path(copy).parents

    def put(self, key: str, data: memoryview | bytes, in_memory: bool = False) -> int:
        """Keep ``data`` (the bytes the store holds at ``key``) as its copy, in shared memory or
        on disk; the bytes written."""
        target = self.path(key, in_memory)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.part")
        try:
            with open(partial, "wb") as f:
                f.write(data)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        return len(data)

    def drop(self, keys: list[str]) -> None:
        """Remove the copies of ``keys`` (those there), and their claims."""
        for key in keys:
            for root in self.roots:
                (root / key).unlink(missing_ok=True)
            self._claim(key).unlink(missing_ok=True)

    @contextlib.contextmanager
    def reading(self, key: str) -> Iterator[str | None]:
        """The copy of ``key`` to read instead of the store's object, or None. Where another
        process copies it now, its copy once there; else this reader claims the object while it
        reads it from the store, so that the server does not copy it as well."""
        near = self.find(key)
        if near or not layout.pool_digest(key):
            yield near
        elif self.claim(key):
            try:
                yield None
            finally:
                self.release(key)
        else:
            yield self.arriving(key)

    def claim(self, key: str) -> bool:
        """Whether this process now reads pool object ``key`` from the store for this node: False
        where another living process claimed it first (and reads it). A claim left by a process
        that is gone is taken over."""
        if not layout.pool_digest(key):
            return True
        path = self._claim(key)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                if _claimant_alive(path):
                    return False
                path.unlink(missing_ok=True)  # its claimant died: the object is ours to read
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return True
        return False

    def release(self, key: str) -> None:
        """Give up this process's claim on ``key`` (read, or failed)."""
        self._claim(key).unlink(missing_ok=True)

    def arriving(self, key: str, timeout: float = ARRIVAL_TIMEOUT) -> str | None:
        """The copy of ``key`` once the process that claimed it has put it here; None where that
        process released its claim without one, died, or took longer than ``timeout`` seconds."""
        claim = self._claim(key)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.find(key)
            if found or not claim.exists() or not _claimant_alive(claim):
                return found or self.find(key)
            time.sleep(ARRIVAL_POLL)
        return None

    def _claim(self, key: str) -> Path:
        path = self.path(key)
        return path.with_name(f".{path.name}.claim")

    def clear(self) -> None:
        """Remove every copy (a server starting: what an earlier one left behind)."""
        for root in self.roots:
            shutil.rmtree(root, ignore_errors=True)


def _claimant_alive(claim: Path) -> bool:
    """Whether the process named in ``claim`` still runs (a claim being written counts as alive)."""
    try:
        text = claim.read_text()
    except FileNotFoundError:
        return False
    if not text.strip().isdigit():
        return True  # created, its process id not yet written
    return running(int(text))


def running(pid: int) -> bool:
    """Whether process ``pid`` runs on this node."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running
        return True
    return True


def for_store(root: str, url: str, keep_free: float = KEEP_FREE, memory: str = "") -> Prefetched:
    """The prefetch folder of the store at ``url`` under ``root`` on disk and ``memory`` in shared
    memory ("": none), one folder per store URL, whose prefetches leave ``keep_free`` of each free."""
    name = hashlib.sha256(url.encode()).hexdigest()[:16]
    return Prefetched(os.path.join(root, name), keep_free, os.path.join(memory, name) if memory else "")
