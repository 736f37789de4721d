"""Reading a local store's files into the page cache ahead of their use.

A resume from a local folder maps its blob files and reads them where they lie. From a cold page
cache that read waits on the disk, and it used to begin only after the kernel had started and
imported torch. ``advise`` asks the operating system to read the files ahead
(``POSIX_FADV_WILLNEED``, from a thread of its own: the disk works while the CPU does something
else), where they fit in ``SHARE`` of the memory the node has available: the server does it as
soon as Resume is clicked, and a kernel's resume before it imports torch.
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


def advise(paths: Iterable[str], size: int) -> threading.Thread | None:
    """Ask for ``paths`` (``size`` bytes in all) to be read ahead, in a thread; that thread, or
    None where there are none, they would take more than ``SHARE`` of the available memory, or
    the system cannot be asked."""
    paths = list(paths)
    if not paths or not hasattr(os, "posix_fadvise") or size > SHARE * memory.available():
        return None
    asking = threading.Thread(target=ask, args=(paths,), name="jupyter-pause-readahead", daemon=True)
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
