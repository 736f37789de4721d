"""Open files and in-memory buffers: buffers by value, files reopened by path, nothing truncated.

``BytesIO``/``StringIO`` keep their value and position (pickle's own support). A file opened on a
path is saved as path, mode, position and text options and reopened on resume without ever
truncating or creating it: a handle that was open for writing (``w``, ``x``) comes back writing at
its saved position, one open for appending keeps appending. A file under the working directory
whose path is gone is looked for under the resume's working directory (a notebook folder that
moved). A file that is gone, or shorter than the saved position, fails to load with the reason,
so the resume names it. A file without a path (``tempfile.TemporaryFile``) comes back by value as
a new temporary file. The process's own streams (``sys.stdout`` ...) come back as the new
process's streams. Anything else that holds an open descriptor is refused with the reason.
"""

from __future__ import annotations

import io
import os
import stat
import sys
import tarfile
import tempfile
import zipfile
from typing import Any

#: The process's standard streams, rebound by name in the restoring process.
STREAMS = ("stdout", "stderr", "stdin", "__stdout__", "__stderr__", "__stdin__")

#: Largest file without a path (a ``TemporaryFile``) saved by value.
MAX_ANONYMOUS_BYTES = 64 << 20

#: Abstract bases that can be instantiated but hold nothing: pickle saves them as they are.
_EMPTY_BASES = (io.IOBase, io.RawIOBase, io.BufferedIOBase, io.TextIOBase)

#: Exact file types ``open()`` returns, and how each is rebuilt.
_LAYERS = {
    io.FileIO: "raw",
    io.BufferedReader: "buffered",
    io.BufferedWriter: "buffered",
    io.BufferedRandom: "buffered",
    io.TextIOWrapper: "text",
}

#: A text position cookie packs the byte offset into its low 64 bits.
_BYTE_OFFSET = (1 << 64) - 1


def process_stream(name: str) -> Any:
    """This process's ``sys.<name>``, for a stream saved as one of the process's own."""
    return getattr(sys, name)


def _stream_name(obj: Any) -> str | None:
    for name in STREAMS:
        if getattr(sys, name, None) is obj:
            return name
    return None


def _keep_contents(path: str, flags: int) -> int:
    """``open()``'s opener for a reopened file: never truncate, never create, never insist on new."""
    return os.open(path, flags & ~(os.O_TRUNC | os.O_CREAT | os.O_EXCL))


def _open_options(f: Any, layer: str) -> dict[str, Any]:
    if layer == "text":
        return {"encoding": f.encoding, "errors": f.errors}
    return {"buffering": 0} if layer == "raw" else {}


def _reconfigure(f: Any, layer: str, flags: dict[str, Any]) -> None:
    if layer == "text" and flags:
        f.reconfigure(**flags)


def _where(path: str, relative: str | None) -> str:
    """The file to reopen: the saved path, or where the folder it was under has moved to."""
    if relative is not None and not os.path.exists(path) and os.path.exists(relative):
        return os.path.abspath(relative)
    return path


def reopen_file(
    layer: str,
    path: str,
    mode: str,
    position: int,
    options: dict[str, Any],
    flags: dict[str, Any],
    relative: str | None = None,
) -> Any:
    """Reopen a saved file handle: same path, mode and position; refuses what would change the file.

    ``relative`` is the path from the working directory at the checkpoint, used when ``path`` is
    gone and the working directory (restored before the variables) holds it: a notebook folder
    moved to another place or node.
    """
    offset = position & _BYTE_OFFSET
    path = _where(path, relative)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"file {path} is gone (it was open with mode {mode!r} at byte {offset}); "
            "put it back and resume again, or open it anew"
        )
    size = os.path.getsize(path)
    if size < offset:
        raise ValueError(
            f"file {path} is {size} bytes, shorter than the position {offset} it was open at "
            f"(mode {mode!r}): it changed since the checkpoint; open it anew"
        )
    f = open(path, mode, opener=_keep_contents, **options)
    if "a" not in mode:
        f.seek(position)
    _reconfigure(f, layer, flags)
    return f


def closed_file(layer: str, kind: type) -> Any:
    """A closed handle of the saved type (a closed file holds nothing to restore)."""
    modes = {io.BufferedWriter: "wb", io.BufferedRandom: "rb+"}
    mode = modes.get(kind, "r" if layer == "text" else "rb")
    f = open(os.devnull, mode, **({"buffering": 0} if layer == "raw" else {}))
    f.close()
    return f


def anonymous_file(layer: str, mode: str, data: bytes, position: int, options: dict[str, Any]) -> Any:
    """A new temporary file holding the saved contents, at the saved position."""
    f = tempfile.TemporaryFile(mode=mode, **options)
    os.write(f.fileno(), data)
    f.seek(position)
    return f


def closed_buffer(kind: type) -> Any:
    """A closed ``BytesIO``/``StringIO`` (its value is gone once closed)."""
    buffer = kind()
    buffer.close()
    return buffer


def _raw_of(f: Any, layer: str) -> Any:
    if layer == "text":
        return getattr(f.buffer, "raw", f.buffer)
    return f.raw if layer == "buffered" else f


def wrapped_stream(kind: type, inner: Any, options: dict[str, Any], position: int) -> Any:
    """A text or buffered wrapper around an in-memory stream, at its saved position."""
    stream = kind(inner, **options)
    stream.seek(position)
    return stream


def _wrapper_by_value(f: Any, layer: str) -> tuple[Any, ...]:
    """A wrapper around something that is not a file (``TextIOWrapper(BytesIO(...))``): by value."""
    if f.writable():
        f.flush()
    options = {"encoding": f.encoding, "errors": f.errors} if layer == "text" else {}
    inner = f.buffer if layer == "text" else f.raw
    return (wrapped_stream, (type(f), inner, options, _position(f, repr(inner))))


def _position(f: Any, name: Any) -> int:
    try:
        return int(f.tell())
    except OSError as e:
        raise TypeError(
            f"open file {name!r}: its position cannot be read ({e}; a text file read with next() "
            "or a for loop); read it with readline(), or reopen it after resume"
        ) from e


def _anonymous(f: Any, layer: str, fd: int) -> tuple[Any, ...]:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise TypeError(f"open descriptor {fd} is not a regular file (a pipe, socket or terminal); it is not saved")
    if info.st_size > MAX_ANONYMOUS_BYTES:
        raise TypeError(f"file without a path (descriptor {fd}) holds {info.st_size} bytes, too many to save by value")
    data = os.pread(fd, info.st_size, 0)
    position = _position(f, fd)
    return (anonymous_file, (layer, f.mode, data, position, _open_options(f, layer)))


def _relative(path: str) -> str | None:
    """``path`` from the working directory, when it lies under it."""
    try:
        relative = os.path.relpath(path)
    except (OSError, ValueError):  # no working directory any more, or another drive
        return None
    return None if relative.split(os.sep)[0] == os.pardir else relative


def reduce_file(f: Any) -> tuple[Any, ...]:
    """A file ``open()`` returned: reopened by path, mode and position, or by value without a path."""
    layer = _LAYERS[type(f)]
    if f.closed:
        return (closed_file, (layer, type(f)))
    raw = _raw_of(f, layer)
    if not isinstance(raw, io.FileIO):
        return _wrapper_by_value(f, layer)
    if f.writable():
        f.flush()  # the saved position counts what was written; the file must hold it too
    if isinstance(raw.name, int):
        return _anonymous(f, layer, raw.fileno())
    path = os.path.abspath(raw.name)
    relative = _relative(path)
    flags = {"line_buffering": f.line_buffering, "write_through": f.write_through} if layer == "text" else {}
    args = (layer, path, f.mode, _position(f, path), _open_options(f, layer), flags)
    return (reopen_file, (*args, relative))


def reduce_stream(obj: io.IOBase) -> tuple[Any, ...] | Any:
    """Any ``io.IOBase``: the process's streams by name, files reopened, buffers by value."""
    name = _stream_name(obj)
    if name is not None:
        return (process_stream, (name,))
    kind = type(obj)
    if kind in _LAYERS:
        return reduce_file(obj)
    if kind in (io.BytesIO, io.StringIO) and obj.closed:
        return (closed_buffer, (kind,))
    if kind in _EMPTY_BASES or isinstance(obj, (io.BytesIO, io.StringIO)):
        return NotImplemented  # pickle keeps the value and position
    try:
        fd = obj.fileno()
    except (OSError, ValueError, AttributeError):
        return NotImplemented  # no descriptor: an in-memory stream, pickled as any object
    raise TypeError(
        f"{type(obj).__qualname__} open on descriptor {fd} ({getattr(obj, 'name', '?')!r}) is not saved: "
        "only files open() returns are reopened; reopen it after resume"
    )


def reopen_tar(path: str) -> tarfile.TarFile:
    """A tar archive opened again for reading."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"tar archive {path} is gone; put it back and resume again")
    return tarfile.open(path, "r")


def closed_archive(kind: type, name: Any, mode: str, members: list[Any]) -> Any:
    """A closed tar or zip archive with the member list it had, made without touching disk."""
    if issubclass(kind, tarfile.TarFile):
        archive: Any = kind.open(fileobj=io.BytesIO(), mode="w")
        archive.close()
        archive.name, archive.members = name, members
    else:
        archive = kind(io.BytesIO(), "w")
        archive.close()
        archive.filename, archive.filelist = name, members
        archive.NameToInfo = {info.filename: info for info in members}
    archive.mode = mode
    return archive


def reduce_tarfile(tar: tarfile.TarFile) -> tuple[Any, ...] | Any:
    """A tar archive read from a path is reopened; one in memory goes by value; one being written is refused."""
    if tar.closed:
        return (closed_archive, (type(tar), tar.name, tar.mode, tar.members))
    if isinstance(tar.fileobj, io.BytesIO):
        return NotImplemented
    if tar.mode == "r" and tar.name and not tar.closed:
        return (reopen_tar, (os.path.abspath(tar.name),))
    raise TypeError(
        f"tar archive {tar.name!r} open with mode {tar.mode!r} is not saved: an archive being written "
        "cannot be continued in another process; reopen it after resume"
    )


def reopen_zip(path: str) -> zipfile.ZipFile:
    """A zip archive opened again for reading."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"zip archive {path} is gone; put it back and resume again")
    return zipfile.ZipFile(path, "r")


def reduce_zipfile(archive: zipfile.ZipFile) -> tuple[Any, ...]:
    """A zip archive read from a path is reopened; one being written, or in memory, is refused."""
    if archive.fp is None:
        return (closed_archive, (type(archive), archive.filename, archive.mode, archive.filelist))
    if archive.mode == "r" and archive.fp is not None and isinstance(archive.filename, str):
        return (reopen_zip, (os.path.abspath(archive.filename),))
    raise TypeError(
        f"zip archive {archive.filename!r} open with mode {archive.mode!r} is not saved: only an "
        "archive open for reading from a path is reopened; reopen it after resume"
    )
