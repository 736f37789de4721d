"""Which pages of this process's memory were written to: Linux's userfaultfd write protection,
in its asynchronous mode, read back with the ``PAGEMAP_SCAN`` ioctl (both Linux 6.7 or later).

A range of anonymous private memory (what ``malloc`` and torch's CPU allocator hand out) is
registered with a userfaultfd and write-protected. The first write to each protected page after
that takes a fault the kernel resolves on its own (the "async" mode: no thread waits on the
descriptor, the writer is not blocked) and the page loses its protection bit. ``PAGEMAP_SCAN``
then lists the pages that lost it, in microseconds per gigabyte, without reading their bytes.

This sees every write that goes through this process's page tables: the CPU's stores, the
kernel's copies into the memory (``read()``, ``recv()``), another process's
``process_vm_writev``, and the first write of anything that pins the pages for a device, since
pinning for writing takes the same fault. It cannot see a device that writes pages pinned
before they were protected (CUDA-registered host memory, RDMA, io_uring fixed buffers), nor the
writes of another process to memory it shares, nor a file changed under a mapping of it. In
asynchronous mode the kernel registers any memory, so ``watch`` itself refuses all but private
anonymous memory (no file, not shared: ``store.mapping.process_maps``), and ``writewatch`` does
not watch pinned or shared storages.

Each process has one descriptor, opened on first use; a forked child opens its own (a child
inherits no registration). Where the kernel lacks these features, or refuses the descriptor,
``watcher()`` answers None and nothing is tracked.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
import os
import sys
import threading

PAGE = mmap.PAGESIZE

_SYS_USERFAULTFD = {"x86_64": 323, "aarch64": 282}
_UFFD_USER_MODE_ONLY = 1  # allowed without privilege even where vm.unprivileged_userfaultfd is 0
_UFFD_API = 0xAA
_FEATURE_WP_UNPOPULATED = 1 << 13  # never-touched pages are protected too
_FEATURE_WP_ASYNC = 1 << 15  # the kernel resolves write faults itself and keeps the record
_REGISTER_MODE_WP = 1 << 1
_WRITEPROTECT_MODE_WP = 1 << 0
_SCAN_CHECK_WPASYNC = 1 << 1  # fail (EPERM) on memory not registered this way
_PAGE_IS_WRITTEN = 1 << 1


def _iowr(kind: int, number: int, size: int) -> int:
    return (3 << 30) | (size << 16) | (kind << 8) | number


class _Range(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Api(ctypes.Structure):
    _fields_ = [("api", ctypes.c_uint64), ("features", ctypes.c_uint64), ("ioctls", ctypes.c_uint64)]


class _Register(ctypes.Structure):
    _fields_ = [("range", _Range), ("mode", ctypes.c_uint64), ("ioctls", ctypes.c_uint64)]


class _WriteProtect(ctypes.Structure):
    _fields_ = [("range", _Range), ("mode", ctypes.c_uint64)]


class _Region(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint64), ("end", ctypes.c_uint64), ("categories", ctypes.c_uint64)]


class _Scan(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "size",
            "flags",
            "start",
            "end",
            "walk_end",
            "vec",
            "vec_len",
            "max_pages",
            "category_inverted",
            "category_mask",
            "category_anyof_mask",
            "return_mask",
        )
    ]


_API = _iowr(_UFFD_API, 0x3F, ctypes.sizeof(_Api))
_REGISTER = _iowr(_UFFD_API, 0x00, ctypes.sizeof(_Register))
_UNREGISTER = (2 << 30) | (ctypes.sizeof(_Range) << 16) | (_UFFD_API << 8) | 0x01  # _IOR
_WRITEPROTECT = _iowr(_UFFD_API, 0x06, ctypes.sizeof(_WriteProtect))
_PAGEMAP_SCAN = _iowr(ord("f"), 16, ctypes.sizeof(_Scan))


def inner(address: int, size: int) -> tuple[int, int]:
    """The whole pages inside ``size`` bytes from ``address``: (first byte, end); empty (end <=
    first byte) where no page is."""
    return -(-address // PAGE) * PAGE, (address + size) // PAGE * PAGE


def within(ranges: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether ``[start, end)`` lies inside one of the ordered, merged ``ranges``."""
    i = bisect.bisect_right(ranges, (start, float("inf"))) - 1
    return i >= 0 and ranges[i][0] <= start and end <= ranges[i][1]


class Watcher:
    """One userfaultfd in asynchronous write-protect mode, and this process's page map."""

    def __init__(self, libc: ctypes.CDLL, number: int) -> None:
        self._libc = libc
        self.pid = os.getpid()
        fd = libc.syscall(number, os.O_CLOEXEC | os.O_NONBLOCK | _UFFD_USER_MODE_ONLY)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "userfaultfd refused")
        self._fd = fd
        try:
            api = _Api(api=_UFFD_API, features=_FEATURE_WP_ASYNC | _FEATURE_WP_UNPOPULATED)
            self._call(self._fd, _API, api)
            self._pagemap = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
            self._scan(0, 0, 0)  # an empty walk: PAGEMAP_SCAN itself is Linux 6.7, refused before
        except OSError:
            os.close(fd)
            raise

    def _scan(self, start: int, flags: int, end: int) -> tuple[int, int]:
        """``PAGEMAP_SCAN`` for the first written page of ``[start, end)``: how many regions it
        found (0 or 1), and where the walk stopped."""
        found = _Region()
        scan = _Scan(
            size=ctypes.sizeof(_Scan),
            flags=flags,
            start=start,
            end=end,
            vec=ctypes.addressof(found),
            vec_len=1,
            max_pages=1,  # the first written page answers the question
            category_mask=_PAGE_IS_WRITTEN,
            return_mask=_PAGE_IS_WRITTEN,
        )
        return self._call(self._pagemap, _PAGEMAP_SCAN, scan), scan.walk_end

    def _call(self, fd: int, request: int, arg: ctypes.Structure) -> int:
        result = self._libc.ioctl(fd, ctypes.c_ulong(request), ctypes.byref(arg))
        if result < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        return result

    def watch(self, start: int, end: int, anonymous: list[tuple[int, int]]) -> bool:
        """Register the pages ``[start, end)`` and protect them; False for memory that is not all
        inside one of the ``anonymous`` ranges (the process's private anonymous memory, as
        ``store.mapping.process_maps`` reads it), or that the kernel refuses (another
        descriptor's)."""
        if not within(anonymous, start, end):
            return False
        try:
            self._call(self._fd, _REGISTER, _Register(range=_Range(start, end - start), mode=_REGISTER_MODE_WP))
        except OSError:
            return False
        try:
            self.protect(start, end, True)
        except OSError:
            self.forget(start, end)
            return False
        return True

    def protect(self, start: int, end: int, on: bool) -> None:
        """Protect the registered pages ``[start, end)`` (``on``: a write is recorded from now),
        or lift their protection (writes go unrecorded, at no cost)."""
        mode = _WRITEPROTECT_MODE_WP if on else 0
        self._call(self._fd, _WRITEPROTECT, _WriteProtect(range=_Range(start, end - start), mode=mode))

    def written(self, start: int, end: int) -> bool | None:
        """Whether any page of ``[start, end)`` was written since it was protected; None where
        the range is not (all) registered here any more (unmapped and mapped again, say)."""
        try:
            regions, walked_to = self._scan(start, _SCAN_CHECK_WPASYNC, end)
        except OSError:
            return None
        if regions == 0 and walked_to < end:  # stopped early at a hole: not all of it is there
            return None
        return regions > 0

    def forget(self, start: int, end: int) -> None:
        """Unregister ``[start, end)``, where it still is (its memory may be gone already)."""
        try:
            self._call(self._fd, _UNREGISTER, _Range(start, end - start))
        except OSError:
            pass


_watcher: Watcher | None = None
_refused_in: int | None = None  # the process that could not open one
_lock = threading.Lock()


def watcher() -> Watcher | None:
    """This process's ``Watcher``, opened on first use; None where Linux cannot track writes."""
    global _watcher, _refused_in
    number = _SYS_USERFAULTFD.get(os.uname().machine) if sys.platform == "linux" else None
    if number is None:
        return None
    pid = os.getpid()
    with _lock:
        if _watcher is not None and _watcher.pid == pid:
            return _watcher
        if _refused_in == pid:
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
            _watcher = Watcher(libc, number)
        except (OSError, AttributeError):
            _watcher, _refused_in = None, pid
        return _watcher
