"""The buffers a store reads into, and reading into memory a caller chooses (``allocating``)."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from jupyter_pause.store import buffers
from tests.support.arena import Arena


def test_buffers_are_aligned_and_writable_small_and_large():
    for size in (1, 1000, buffers.LARGE, buffers.LARGE * 3 + 5):
        buf = buffers.buffer(size)
        assert len(buf) == size and not buf.readonly
        assert np.frombuffer(buf, dtype=np.uint8).__array_interface__["data"][0] % buffers.ALIGNMENT == 0


def _mapping_of(address: int) -> tuple[str, int]:
    """The permissions and resident kilobytes of this process's mapping holding ``address``."""
    found, perms = False, ""
    for line in open("/proc/self/smaps"):
        head = line.split()
        if "-" in head[0] and len(head) >= 5:
            start, end = (int(x, 16) for x in head[0].split("-"))
            found, perms = start <= address < end, head[1]
        elif found and head[0] == "Rss:":
            return perms, int(head[1])
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_a_large_buffer_is_private_memory_already_paged_in():
    buf = buffers.buffer(8 * buffers.LARGE)
    perms, resident_kb = _mapping_of(np.frombuffer(buf, dtype=np.uint8).__array_interface__["data"][0])
    assert perms.endswith("p")  # private: not the shared memory mmap makes by default
    assert resident_kb * 1024 >= len(buf)  # populated as mapped, not faulted in page by page


def test_inside_allocating_every_buffer_comes_from_the_allocator_and_after_it_none_does(tmp_path):
    arena = Arena()
    path = tmp_path / "blob"
    path.write_bytes(bytes(range(256)) * 5000)
    with buffers.allocating(arena):
        small = buffers.buffer(10)
        large = buffers.buffer(buffers.LARGE * 2)
        read = buffers.read_local(str(path))
        copied = buffers.aligned_copy(b"abc")
    assert [len(a) for a in arena.given] == [10, buffers.LARGE * 2, 256 * 5000, 3]
    assert all(arena.owns(b) for b in (small, large, read, copied))
    assert bytes(read) == path.read_bytes() and bytes(copied) == b"abc"
    after = buffers.buffer(10)
    assert not arena.owns(after) and len(arena.given) == 4


def test_a_nested_none_keeps_the_allocator_and_the_outer_one_comes_back():
    outer, inner = Arena(), Arena()
    with buffers.allocating(outer):
        with buffers.allocating(None):
            assert outer.owns(buffers.buffer(5))
        with buffers.allocating(inner):
            assert inner.owns(buffers.buffer(6))
        assert outer.owns(buffers.buffer(7))
    assert [len(a) for a in outer.given] == [5, 7] and [len(a) for a in inner.given] == [6]


def test_another_thread_is_not_given_this_threads_allocator():
    arena = Arena()
    seen: list[memoryview] = []
    with buffers.allocating(arena):
        worker = threading.Thread(target=lambda: seen.append(buffers.buffer(100)))
        worker.start()
        worker.join()
    assert seen and not arena.owns(seen[0]) and arena.given == []
