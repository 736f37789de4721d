"""A local folder: writes flushed to disk, create-if-absent by a hard link, reads mapped or read
straight into an aligned buffer."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable

from .. import directio, mapping
from ..buffers import Buffer, read_local
from .base import Backend

#: How the temporary name of a file being written starts (it ends in ``.part``): a writer killed
#: mid-write leaves one, which cleanup removes once it is old.
PART_PREFIX = "."


class LocalBackend(Backend):
    """A folder on a local (or network-mounted POSIX) filesystem."""

    name = "local folder"
    local = True

    def fresh(self, path: str) -> str:
        return path  # the filesystem itself is asked each time: nothing is cached

    def write(self, path: str, view: memoryview) -> None:
        """Write and fsync: durable on disk before it returns."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _write_synced(path, [view])

    def write_whole(self, path: str, view: memoryview) -> None:
        """Write a temporary name, fsync, then move it onto ``path``: a reader sees the old file
        or the new one, whole, never a file being written over (``os.replace`` is atomic)."""
        _through_temporary(path, view, os.replace)

    def write_stream(self, path: str, chunks: Iterable[bytes], keep: Callable[[], bool]) -> None:
        """Write ``chunks`` to a temporary name and fsync; move it onto ``path`` only when
        ``keep()`` then answers True (else it is removed): a reader never sees it part-written."""
        temporary = _temporary(path)
        try:
            _write_synced(temporary, chunks)
            if keep():
                os.replace(temporary, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)

    def sizes(self, paths: list[str]) -> list[int | None]:
        """The size of each file, None where there is none (a stat each: no threads needed)."""
        found: list[int | None] = []
        for path in paths:
            try:
                found.append(os.stat(path).st_size)
            except (FileNotFoundError, NotADirectoryError):
                found.append(None)
        return found

    def create(self, path: str, data: bytes) -> None:
        """Write a temporary name, then link it to ``path``: atomic, and refused
        (``FileExistsError``) if ``path`` exists."""
        _through_temporary(path, data, os.link)

    def read(self, path: str, size: int | None, unchanging: bool, mapped: bool = False) -> Buffer:
        """The whole file, read straight into an aligned buffer. With ``mapped``, a large file
        comes back as a private mapping of it (see ``mapping``): no copy is made, and pages are
        copied only where they are written to."""
        if mapped:
            view = mapping.map_file(path)
            if view is not None:
                return view
        return read_local(path)

    def check(self, root: str) -> None:
        """The folder is created; it must be writable."""
        os.makedirs(root, exist_ok=True)
        if not os.access(root, os.W_OK | os.X_OK):
            raise PermissionError(f"no write permission on {root}")


def _through_temporary(path: str, data: bytes | memoryview, place: Callable[[str, str], None]) -> None:
    """Write ``data`` to a temporary name beside ``path`` and fsync it, then ``place`` it at
    ``path`` (``os.replace``: over what is there; ``os.link``: only where nothing is)."""
    temporary = _temporary(path)
    try:
        if not directio.write_new(temporary, memoryview(data).cast("B")):
            _write_synced(temporary, [data])
        place(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def _temporary(path: str) -> str:
    """The temporary name ``path`` is written under (this process's and thread's own), its folder made."""
    folder, name = os.path.split(path)
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{PART_PREFIX}{name}.{os.getpid()}-{threading.get_ident()}.part")


def _write_synced(path: str, chunks: Iterable[bytes | memoryview]) -> None:
    """``chunks`` into the file at ``path`` (created, or emptied), then fsynced."""
    with open(path, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
