"""Not hashing CPU memory again that nothing wrote to since it was last hashed.

A checkpoint of a session that did not come from a resume had to read every large array to hash
it, even the 99% a training step did not touch: about 0.1 s per GB, most of the next checkpoint.
Now each large CPU array (a torch storage, a NumPy array) is write-protected before it is hashed
(``uffd``). At the next checkpoint, if not one of its pages was written since, its bytes are still
those hashed, and the digest is reused without reading them.

Only the whole pages inside an array are protected: the bytes it shares a page with its
neighbours (the allocator's headers, the next array) are written by them, so the few bytes of
the array outside those pages are instead copied before hashing and compared.

Protection has a price: the first write to each protected page takes a fault (about 0.1 s per GB
written, once) and splits transparent huge pages. So only memory that stays unchanged is kept
protected. An array moves between three states:

- armed: protected, its digest unknown yet. It is hashed; if no page was written meanwhile, the
  digest is kept and the array is settled.
- settled: protected, with its digest. Unwritten at a checkpoint, it is not read: its digest
  stands. Written, it becomes hot.
- hot: unprotected; hashed at every checkpoint. When two checkpoints in a row give the same
  digest, it is armed again.

Which writes count, and which memory is never tracked, is in ``uffd``. Besides memory that is
not private and anonymous (shared, or a file's), torch storages that are pinned (a GPU copies
into them without the CPU) or shared between processes are never tracked, nor any array whose
memory overlaps another tracked one. An array is known by its identity (a weak reference to the torch
storage or NumPy array) and its place (address, size): if either changes, it starts over as a
new array, so memory freed and reused is never mistaken for the memory that was hashed.

Nothing is tracked while a device runtime is loaded whose pinned host memory torch cannot name
(``memory``: CUDA driven by another library than torch). And the kernel's record is checked:
each checkpoint hashes a few of the arrays it would skip (``AUDIT_BYTES`` on average, in turn),
and one whose bytes are not its digest's makes that checkpoint hash everything, say so in its
summary, and ends tracking in the process (``_audit``).

``PauseConfig.track_writes`` (``JUPYTER_PAUSE_TRACK_WRITES``) turns this off; the manifest's
``bytes_unread`` counts what was not read.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..store import mapping, signing
from . import uffd

#: Most arrays tracked at once; beyond it, the one a checkpoint saw longest ago makes room, and
#: where every one was seen by this checkpoint, the others are hashed as before.
MAX_TRACKED = 4096
#: Bytes of the arrays it skips that a checkpoint hashes all the same, on average, a few arrays in
#: turn, to check the kernel's record against their bytes (``_audit``).
AUDIT_BYTES = 32 << 20
#: Device runtimes through which a device writes host memory it pinned, by the torch accelerator
#: that can say which memory is pinned once torch drives it (``memory``).
DEVICE_RUNTIMES = {"libcuda.so": "cuda", "libamdhip64.so": "cuda", "libze_loader.so": "xpu"}


@dataclass(eq=False)
class _Entry:
    """One tracked array."""

    key: int  # its identity
    alive: Callable[[], bool]
    origin: tuple[int, int]  # (address, size) of its bytes
    start: int  # the whole pages inside them, protected
    end: int
    #: Its bytes outside those pages (shared with its neighbours in memory, which write them):
    #: copied before it is hashed, compared instead of protected.
    edges: bytes = b""
    protected: bool = True
    #: (algorithm, digest) of its bytes, hashed after protection and unwritten since: "settled".
    digest: tuple[str, str] | None = None
    #: (algorithm, digest) at the last checkpoint, while "hot".
    last: tuple[str, str] | None = None
    dropped: bool = False
    seen: int = 0  # the last checkpoint (``_checks``) that had this array


@dataclass
class Watched:
    """What one checkpoint learned: digests that stand, and arrays whose digest to note once hashed."""

    known: dict[str, str] = field(default_factory=dict)  # array key -> digest, unread
    pending: dict[str, _Entry] = field(default_factory=dict)  # array key -> entry
    algorithm: str = ""
    notes: list[str] = field(default_factory=list)  # for the summary: tracking found wanting, switched off


#: By identity (torch StorageImpl address, id() of an array), in the order checkpoints last saw them.
_entries: dict[int, _Entry] = {}
_starts: list[int] = []  # sorted page starts of the entries, to find overlaps
_by_start: dict[int, _Entry] = {}
_pid = 0
_lock = threading.Lock()
_checks = 0  # checkpoints that looked at tracked arrays so far
_audits = 0  # arrays audited so far: where the next audit starts
_credit = 0  # bytes the next audits may hash (``_audit``)
_off = ""  # why tracking is off in this process (an audit found a write it had not recorded)


def _identity(found: Any) -> tuple[int, Callable[[], bool]] | None:
    """A key and a liveness test for the array ``found`` holds; None if something other than this
    process's CPU may write its memory (pinned for a device, shared with another process)."""
    owner = found.keepalive[0] if isinstance(found.keepalive, tuple) else None
    if found.kind == "torch" and owner is not None:
        from torch.multiprocessing.reductions import StorageWeakRef

        if owner.is_shared() or (_accelerated() and owner.is_pinned()):
            return None
        ref = StorageWeakRef(owner)
        return owner._cdata, lambda: not ref.expired()
    if found.kind == "numpy" and owner is not None:
        if _pinned(found.data):
            return None
        array_ref = weakref.ref(owner)
        return id(owner), lambda: array_ref() is not None
    return None


def _drives(accelerator: str) -> bool:
    """Whether torch drives ``accelerator`` ("cuda", "xpu") in this process: only then may its
    memory be pinned, and only then is it asked (``is_pinned`` creates a CUDA context in some
    versions)."""
    is_initialized = getattr(getattr(sys.modules.get("torch"), accelerator, None), "is_initialized", None)
    return is_initialized is not None and bool(is_initialized())


def _accelerated() -> bool:
    """Whether torch drives any accelerator that can pin host memory."""
    return any(_drives(accelerator) for accelerator in set(DEVICE_RUNTIMES.values()))


def _pinned(data: memoryview) -> bool:
    """Whether an accelerator pinned this host memory (torch can tell, once it drives one)."""
    if not _accelerated():
        return False
    import numpy as np

    torch = sys.modules["torch"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a read-only buffer: torch warns, nothing is written
        return bool(torch.from_numpy(np.asarray(data)).is_pinned())


def _drop(watcher: uffd.Watcher, key: int) -> None:
    entry = _entries.pop(key)
    entry.dropped = True
    del _by_start[entry.start]
    _starts.remove(entry.start)
    watcher.forget(entry.start, entry.end)


def _edges(entry: _Entry) -> bytes:
    address, size = entry.origin
    return ctypes.string_at(address, entry.start - address) + ctypes.string_at(entry.end, address + size - entry.end)


def _overlaps(start: int, end: int) -> bool:
    i = bisect.bisect_right(_starts, start)
    before = _by_start[_starts[i - 1]] if i else None
    after = _by_start[_starts[i]] if i < len(_starts) else None
    return (before is not None and before.end > start) or (after is not None and after.start < end)


def _track(
    watcher: uffd.Watcher, found: Any, layout: Callable[[], list[tuple[int, int]]]
) -> tuple[_Entry | None, bool]:
    """This checkpoint's entry for ``found`` (None: not tracked), and whether it is new (armed
    just now); ``layout`` gives the process's private anonymous memory."""
    identity = _identity(found)
    if identity is None:
        return None, False
    key, alive = identity
    origin = (found.origin[1], found.origin[2])
    entry = _entries.get(key)
    if entry is not None and entry.origin == origin:
        entry.seen = _checks
        _entries[key] = _entries.pop(key)  # the most recently seen last
        return entry, False
    if entry is not None:  # moved (resized in place)
        _drop(watcher, key)
    start, end = uffd.inner(*origin)
    if end <= start or not _room(watcher) or _overlaps(start, end) or not watcher.watch(start, end, layout()):
        return None, False
    entry = _Entry(key=key, alive=alive, origin=origin, start=start, end=end, seen=_checks)
    _entries[key] = entry
    _by_start[start] = entry
    bisect.insort(_starts, start)
    return entry, True


def _room(watcher: uffd.Watcher) -> bool:
    """Whether one more array may be tracked, once the one seen longest ago (not by this
    checkpoint) has made room if need be."""
    if len(_entries) < MAX_TRACKED:
        return True
    oldest = next(iter(_entries.values()))
    if oldest.seen == _checks:
        return False
    _drop(watcher, oldest.key)
    return True


def _look(watcher: uffd.Watcher, entry: _Entry, algorithm: str) -> str | None:
    """The digest of a tracked entry's bytes if nothing wrote them since they were hashed; else
    None, and an entry whose pages were written becomes hot."""
    if not entry.protected:
        return None
    written = watcher.written(entry.start, entry.end)  # the pages inside; the edges by their bytes
    if written is None:  # no longer registered: its memory was unmapped
        _drop(watcher, entry.key)
        return None
    if not written and (entry.digest is None or _edges(entry) == entry.edges):  # armed: hashed anyway
        return entry.digest[1] if entry.digest is not None and entry.digest[0] == algorithm else None
    entry.last, entry.digest, entry.protected = entry.digest, None, False
    try:
        watcher.protect(entry.start, entry.end, False)
    except OSError:  # no longer registered: tracked no more, hashed as it is anyway
        _drop(watcher, entry.key)
    return None


def check(found: Iterable[tuple[str, Any]], algorithm: str, anonymous: list[tuple[int, int]] | None = None) -> Watched:
    """Before hashing the large CPU arrays ``found`` (array key, ``arrays.Collected``): the
    digests that stand without reading them, and the arrays to ``settle`` once hashed.
    ``anonymous``: the process's private anonymous memory as the checkpoint read it once
    (``ProcessMaps.anonymous``); read here, if an array needs it, when not given."""
    watched = Watched(algorithm=algorithm)
    watcher = uffd.watcher()
    if watcher is None or _off:
        return watched
    global _pid, _checks
    found = list(found)
    with _lock:
        _checks += 1
        if _pid != watcher.pid:  # a forked child: it inherits no registration
            _entries.clear()
            _starts.clear()
            _by_start.clear()
            _pid = watcher.pid
        for key in [k for k, e in _entries.items() if not e.alive()]:
            _drop(watcher, key)
        layout = functools.cache(lambda: mapping.process_maps().anonymous if anonymous is None else anonymous)
        for array_key, f in found:
            if f.origin is None or f.origin[0] != "cpu" or f.private or f.data is None:
                continue
            entry, new = _track(watcher, f, layout)
            if entry is None:
                continue
            digest = None if new else _look(watcher, entry, algorithm)
            if digest is not None:
                watched.known[array_key] = digest
            elif not entry.dropped:
                if entry.protected:  # before it is hashed: a later write to them shows as a difference
                    entry.edges = _edges(entry)
                watched.pending[array_key] = entry
        missed = _audit(watched, {k: f.data for k, f in found if k in watched.known})
        if missed:
            _switch_off(watcher, missed)
            return Watched(algorithm=algorithm, notes=[f"{_off}: write tracking is off in this kernel"])
    return watched


def _audit(watched: Watched, data: dict[str, Any]) -> str:
    """Hash some of the arrays ``watched`` would skip and compare: the array key of one whose bytes
    are not what its digest says, if any. Each checkpoint adds ``AUDIT_BYTES`` to a credit that
    the arrays, taken in turn from checkpoint to checkpoint, spend by their size: a large array
    is audited every few checkpoints, and the cost stays ``AUDIT_BYTES`` a checkpoint on average.

    The kernel's record is trusted only as far as it is checked: a write it missed (a device
    writing memory pinned unseen, a kernel bug) would otherwise make a checkpoint keep stale
    bytes without a word. Found, it makes this checkpoint hash everything, and stops tracking."""
    global _audits, _credit
    keys = sorted(watched.known)
    if not keys:
        return ""
    _credit += AUDIT_BYTES
    turn: list[str] = []
    while len(turn) < len(keys) and len(data[key := keys[(_audits + len(turn)) % len(keys)]]) <= _credit:
        _credit -= len(data[key])
        turn.append(key)
    _audits += len(turn)
    return next((k for k in turn if signing.digest(data[k], watched.algorithm) != watched.known[k]), "")


def _switch_off(watcher: uffd.Watcher, missed: str) -> None:
    global _off
    _off = f"array {missed} changed without the kernel recording a write to it"
    _drop_all(watcher)


def _drop_all(watcher: uffd.Watcher) -> None:
    for key in list(_entries):
        _drop(watcher, key)


def memory(maps: mapping.ProcessMaps) -> list[tuple[int, int]] | None:
    """The memory in which a checkpoint may track writes: the process's private anonymous memory;
    none while a device runtime is loaded whose pinned memory torch cannot name (another library
    drives the device), since the device may write host memory it pinned without the CPU."""
    for library, accelerator in DEVICE_RUNTIMES.items():
        if not _drives(accelerator) and any(library in m.path for m in maps.files):
            return None
    return maps.anonymous


def forget() -> None:
    """Track nothing, as a new process: every array's registration is lifted."""
    watcher = uffd.watcher()
    if watcher is None:
        return
    with _lock:
        _drop_all(watcher)


def settle(watched: Watched, digests: dict[str, str]) -> None:
    """Note the digests ``check`` left to hash (array key -> digest): a protected entry settles
    on its digest; a hot one whose digest did not change since the last checkpoint is armed."""
    watcher = uffd.watcher()
    if watcher is None or not watched.pending:
        return
    with _lock:
        for array_key, entry in watched.pending.items():
            digest = digests.get(array_key)
            if not digest or entry.dropped:
                continue
            noted = (watched.algorithm, digest)
            if entry.protected:
                entry.digest = noted
            elif entry.last == noted:
                try:
                    watcher.protect(entry.start, entry.end, True)
                except OSError:
                    continue
                entry.protected, entry.last = True, None  # armed: its digest is taken next time
            else:
                entry.last = noted
