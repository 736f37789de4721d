"""Reading a local store's files into the page cache ahead of their use.

A resume from a local folder maps its blob files and reads them where they lie. From a cold page
cache that read waits on the disk, and it used to begin only after the kernel had started and
imported torch. ``advise`` reads the files into the page cache from a thread of its own (the
disk works while the CPU does something else), where they fit in ``SHARE`` of the memory the node
has available: the server does it once a resume waits or its kernel has answered, and a kernel's
resume before it imports torch.

The files are read one after another (``read_through``), each sent to the null device: the pages
land in the page cache and nothing is copied into this process. Asked for all at once instead
(``POSIX_FADV_WILLNEED``), a gigabyte of reads queued ahead of everything else the disk was asked
meanwhile: the new kernel's own files, torch's, a status write's sync, and a click's kernel took
1.2-1.3 s to answer where it took 0.6. ``ask`` still asks for small files all at once: a
package's modules, read ahead of its import (``session.preimport``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from . import memory

if TYPE_CHECKING:
    from .manifest import Manifest
    from .storage import Store

#: Share of the node's available memory the files read ahead may take.
SHARE = 0.5
#: Bytes of a file sent to the null device by one call.
SEND = 64 << 20


def advise(paths: Iterable[str], size: int) -> threading.Thread | None:
    """Read ``paths`` (``size`` bytes in all) into the page cache, in a thread, one file after
    another (``read_through``); that thread, or None where there are none, they would take more
    than ``SHARE`` of the available memory, or the system can be asked neither way."""
    paths = list(paths)
    can = hasattr(os, "sendfile") or hasattr(os, "posix_fadvise")
    if not paths or not can or size > SHARE * memory.available():
        return None
    asking = threading.Thread(target=read_through, args=(paths,), name="jupyter-pause-readahead", daemon=True)
    asking.start()
    return asking


def blob_paths(store: Store, manifest: Manifest, digests: Iterable[str]) -> list[str]:
    """The files of ``manifest``'s blobs ``digests`` in ``store``, where it is a local folder
    (none elsewhere, nor where a key this reader lacks named them: the read says so)."""
    digests = [d for d in digests if d in manifest.blobs]
    if not store.local or not digests:
        return []
    try:
        return [store.path(key) for key in manifest.blob_keys(digests, store.names)]
    except KeyError:
        return []


def read_through(paths: Iterable[str]) -> int:
    """Read each of ``paths`` into the page cache, one after another, by sending it to the null
    device (the disk's queue holds one file's reads at a time; the pages stay cached, nothing is
    copied here); how many were read. Missing and unreadable files are passed over; where the
    system cannot send a file there, the rest are asked for at once (``ask``)."""
    paths = list(paths)
    try:
        sink = os.open(os.devnull, os.O_WRONLY) if hasattr(os, "sendfile") else None
    except OSError:
        sink = None
    if sink is None:
        return ask(paths)
    read = 0
    try:
        for i, path in enumerate(paths):
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                _send_whole(fd, sink)
                read += 1
            except OSError:  # no sending to the null device here (macOS sends only to sockets)
                return read + ask(paths[i:])
            finally:
                os.close(fd)
    finally:
        os.close(sink)
    return read


def _send_whole(fd: int, sink: int) -> None:
    offset = 0
    while sent := os.sendfile(sink, fd, offset, SEND):
        offset += sent


def ask(paths: Iterable[str]) -> int:
    """Ask for each of ``paths`` to be read ahead, here and now (each request returns at once:
    the disk reads behind it); how many were asked for. Missing and unreadable files are passed
    over (whoever reads them says why), and nothing is asked where the system cannot be."""
    if not hasattr(os, "posix_fadvise"):
        return 0
    asked = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            asked += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return asked
