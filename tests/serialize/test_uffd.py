"""The kernel's record of written pages: every write to protected memory is listed, and memory it
cannot watch is refused rather than reported unwritten."""

from __future__ import annotations

import ctypes
import mmap
import os
import threading

import numpy as np
import pytest

from jupyter_pause.serialize import uffd
from jupyter_pause.store.mapping import process_maps

watcher = uffd.watcher()
pytestmark = pytest.mark.skipif(watcher is None, reason="this kernel cannot track writes (Linux 6.7 or later can)")

SIZE = 64 * uffd.PAGE


@pytest.fixture
def region():
    """Anonymous private memory, watched: (the mapping, its first byte, its end)."""
    memory = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    start = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    assert watcher.watch(start, start + SIZE, process_maps().anonymous)
    yield memory, start, start + SIZE
    watcher.forget(start, start + SIZE)
    memory.close()


def test_inner_pages_are_the_whole_pages_inside():
    page = uffd.PAGE
    assert uffd.inner(3 * page, page) == (3 * page, 4 * page)
    assert uffd.inner(3 * page + 16, 2 * page) == (4 * page, 5 * page)
    start, end = uffd.inner(3 * page + 16, page)
    assert end <= start  # no whole page


def test_a_watched_range_lists_only_the_pages_written(region):
    memory, start, end = region
    assert watcher.written(start, end) is False
    memory[10 * uffd.PAGE + 5] = 1
    assert watcher.written(start, end) is True
    assert watcher.written(start + 10 * uffd.PAGE, start + 11 * uffd.PAGE) is True
    assert watcher.written(start, start + 10 * uffd.PAGE) is False  # the pages before it
    assert watcher.written(start + 11 * uffd.PAGE, end) is False  # and after it


def test_protecting_again_forgets_what_was_written(region):
    memory, start, end = region
    memory[0] = 1
    watcher.protect(start, end, True)
    assert watcher.written(start, end) is False
    watcher.protect(start, end, False)  # unprotected: writes cost nothing and count as written
    assert watcher.written(start, end) is True


@pytest.mark.parametrize("how", ["kernel copy", "another thread", "memmove", "reading never-touched pages"])
def test_writes_that_do_not_go_through_python_are_seen(region, tmp_path, how):
    memory, start, end = region
    target = np.frombuffer(memory, dtype=np.uint8)
    if how == "kernel copy":  # read() copies into the memory from inside the kernel
        source = tmp_path / "bytes"
        source.write_bytes(b"\x07" * 100)
        fd = os.open(source, os.O_RDONLY)
        try:
            assert os.readv(fd, [memoryview(memory)[20 * uffd.PAGE : 20 * uffd.PAGE + 100]]) == 100
        finally:
            os.close(fd)
    elif how == "another thread":
        writer = threading.Thread(target=target.__setitem__, args=(slice(30 * uffd.PAGE, 30 * uffd.PAGE + 1), 9))
        writer.start()
        writer.join()
    elif how == "memmove":
        ctypes.memmove(start + 40 * uffd.PAGE, b"\x01\x02", 2)
    else:  # reading is not writing: protected never-touched pages stay unwritten until written
        assert int(target[50 * uffd.PAGE :].sum()) == 0
        assert watcher.written(start, end) is False
        target[63 * uffd.PAGE] = 1
    assert watcher.written(start, end) is True


def test_memory_unmapped_and_mapped_again_is_not_reported_unwritten(region):
    memory, start, end = region
    again = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        other = ctypes.addressof(ctypes.c_char.from_buffer(again))
        assert watcher.written(other, other + SIZE) is None  # never registered: no answer
    finally:
        again.close()


def test_a_file_mapping_or_shared_memory_is_refused(tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"\0" * SIZE)
    with open(path, "r+b") as f:
        mapped = mmap.mmap(f.fileno(), SIZE, flags=mmap.MAP_PRIVATE)
    shared = mmap.mmap(-1, SIZE)  # MAP_SHARED: another process may write it
    try:
        anonymous = process_maps().anonymous
        for memory in (mapped, shared):
            start = ctypes.addressof(ctypes.c_char.from_buffer(memory))
            assert watcher.watch(start, start + SIZE, anonymous) is False
    finally:
        mapped.close()
        shared.close()


def test_a_kernel_that_refuses_the_descriptor_gives_no_watcher(monkeypatch):
    """Where the system call does not exist (an older kernel) or a seccomp profile blocks it,
    nothing is tracked: the caller hashes, as it always did."""
    monkeypatch.setattr(uffd, "_watcher", None)
    monkeypatch.setattr(uffd, "_refused_in", None)
    monkeypatch.setattr(uffd, "_SYS_USERFAULTFD", {os.uname().machine: 99_999})  # ENOSYS
    assert uffd.watcher() is None
    assert uffd._refused_in == os.getpid()  # not asked again by this process
