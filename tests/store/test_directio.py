"""Large files written past the page cache (store/directio.py): every byte lands, whatever the
alignment of the bytes and their length; what cannot be written so is left to a buffered write."""

from __future__ import annotations

import errno
import mmap
import os
import sys

import numpy as np
import pytest

from jupyter_pause.store import directio

pytestmark = pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT on this platform")


@pytest.fixture(autouse=True)
def no_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(directio, "_refused", set())


@pytest.fixture
def tmp_path(tmp_path):
    """The test's folder, on a filesystem that takes direct I/O (an older tmpfs refuses it)."""
    try:
        os.close(os.open(tmp_path / "probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600))
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        pytest.skip(f"{tmp_path} is on a filesystem that refuses O_DIRECT")
    os.unlink(tmp_path / "probe")
    return tmp_path


def _noting(calls: list, real):
    """``real``, noting the arguments of each call in ``calls``."""

    def noted(*args):
        calls.append(args)
        return real(*args)

    return noted


def _bytes(size: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


@pytest.mark.parametrize("size", [directio.MIN_BYTES, 3 * directio.BLOCK + 12345, directio.BLOCK])
def test_unaligned_bytes_of_any_length_land_whole(tmp_path, size):
    source = _bytes(size + 1)[1:]  # starts one byte past an allocation: never aligned
    path = tmp_path / "blob"
    assert directio.write_new(str(path), memoryview(source))
    assert path.stat().st_size == size and path.read_bytes() == source.tobytes()


def test_aligned_bytes_are_written_as_they_lie(tmp_path, monkeypatch):
    size = 2 * directio.BLOCK + 100
    region = mmap.mmap(-1, size)  # page-aligned
    region[:] = _bytes(size, seed=1).tobytes()
    staged: list[tuple] = []
    monkeypatch.setattr(directio, "_buffer", _noting(staged, directio._buffer))
    assert directio.write_new(str(tmp_path / "blob"), memoryview(region))
    assert (tmp_path / "blob").read_bytes() == region[:]
    assert len(staged) == 1  # only the last, short block went through the thread's buffer


def test_the_file_is_opened_for_direct_io_and_fsynced(tmp_path, monkeypatch):
    opened, synced = [], []
    monkeypatch.setattr(os, "open", _noting(opened, os.open))
    monkeypatch.setattr(os, "fsync", _noting(synced, os.fsync))
    assert directio.write_new(str(tmp_path / "blob"), memoryview(_bytes(directio.MIN_BYTES)))
    assert len(opened) == 1 and opened[0][1] & os.O_DIRECT and len(synced) == 1


def test_a_small_file_is_left_to_a_buffered_write(tmp_path):
    assert not directio.write_new(str(tmp_path / "small"), memoryview(_bytes(directio.MIN_BYTES - 1)))
    assert not (tmp_path / "small").exists()


def test_a_filesystem_that_refuses_direct_io_is_written_the_usual_way_from_then_on(tmp_path, monkeypatch):
    tries = []
    real_open = os.open

    def refusing(path, flags, *args):
        if flags & os.O_DIRECT:
            tries.append(path)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refusing)
    data = memoryview(_bytes(directio.MIN_BYTES))
    assert not directio.write_new(str(tmp_path / "a"), data)
    assert not directio.write_new(str(tmp_path / "b"), data)
    assert len(tries) == 1  # the refusal was noted for the filesystem


def test_a_failing_disk_is_not_taken_for_a_refusal(tmp_path, monkeypatch):
    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(OSError, match="No space left"):
        directio.write_new(str(tmp_path / "blob"), memoryview(_bytes(directio.MIN_BYTES)))
    assert not directio._refused


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the backend's temporary-then-link write")
def test_a_local_store_writes_a_large_pool_blob_directly_and_reads_it_back(tmp_path, monkeypatch):
    from jupyter_pause.store import layout
    from jupyter_pause.store.storage import Store

    written = []
    real = directio.write_new

    def watched(path: str, view: memoryview) -> bool:
        done = real(path, view)
        written.append(done)
        return done

    monkeypatch.setattr(directio, "write_new", watched)
    data = _bytes(directio.MIN_BYTES + 7, seed=3).tobytes()
    store = Store(str(tmp_path / "store"))
    key = layout.pool_key("0" * 32)
    store.write(key, data)
    assert written == [True] and bytes(store.read(key)) == data
