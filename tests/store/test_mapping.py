"""Private mappings of local blobs: the file's bytes, no copy, no file left open, gone with the last array."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.store import mapping
from tests.support.processes import another_process

pytestmark = [
    pytest.mark.skipif(not mapping.available(), reason="this platform cannot map files"),
    pytest.mark.usefixtures("new_process"),
]


def _mapped(path) -> bool:
    with open("/proc/self/maps") as f:
        return any(line.rstrip().endswith(str(path)) for line in f)


def _file(tmp_path, size: int = 3 << 20):
    data = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8).tobytes()
    path = tmp_path / "blob"
    path.write_bytes(data)
    return path, data


def test_a_mapping_shows_the_file_and_writes_stay_private(tmp_path):
    path, data = _file(tmp_path)
    view = mapping.map_file(str(path))
    assert view is not None and len(view) == len(data) and bytes(view) == data
    view[0] = (view[0] + 1) % 256
    assert path.read_bytes() == data  # copy-on-write: the file is untouched


def test_small_files_are_read_not_mapped(tmp_path):
    path = tmp_path / "small"
    path.write_bytes(b"x" * 100)
    assert mapping.map_file(str(path)) is None


def test_no_file_stays_open_and_the_mapping_goes_with_its_last_array(tmp_path):
    path, data = _file(tmp_path)
    before = len(os.listdir("/proc/self/fd"))
    view = mapping.map_file(str(path))
    assert len(os.listdir("/proc/self/fd")) == before
    tensor = torch.frombuffer(view, dtype=torch.uint8)
    del view
    gc.collect()
    assert _mapped(path) and bytes(tensor[:16].numpy()) == data[:16]
    path.unlink()  # deleting a mapped file is safe: the pages stay until unmapped
    assert int(tensor.sum()) == sum(data)
    del tensor
    gc.collect()
    assert not _mapped(path)


def test_resume_builds_large_tensors_on_mapped_blobs(tmp_path):
    ns = {"w": torch.randn(1_000_000), "a": np.arange(500_000, dtype=np.float64)}
    manifest = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    another_process()
    target: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=target)
    blob = tmp_path / manifest.blob_key(manifest.arrays[manifest.variables[-1].arrays[0]].blob)
    assert _mapped(blob)
    target["w"].add_(1)  # the restored tensor is writable; the blob is not changed
    assert torch.equal(target["w"], ns["w"] + 1) and np.array_equal(target["a"], ns["a"])
    another_process()
    again: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=again)
    assert torch.equal(again["w"], ns["w"])
    del target, again
    gc.collect()
    assert not _mapped(blob)


def test_an_unwritten_mapping_names_its_blob_and_a_write_unnames_it(tmp_path):
    path, data = _file(tmp_path)
    view = mapping.map_file(str(path))
    array = np.frombuffer(view, dtype=np.uint8)
    address = array.__array_interface__["data"][0]
    assert mapping.unchanged_blob(address, len(data), "xxh3_128") is None  # not verified yet
    mapping.remember_blob(view, "xxh3_128", "ab" * 16)
    assert int(array.sum()) == sum(data)  # reading changes nothing
    assert mapping.unchanged_blob(address, len(data), "xxh3_128") == "ab" * 16
    assert mapping.unchanged_blob(address, len(data), "sha256") is None  # another digest
    assert mapping.unchanged_blob(address, len(data) - 1, "xxh3_128") is None  # not the whole blob
    array[len(data) - 1] ^= 1  # one bit, in the last page
    assert mapping.unchanged_blob(address, len(data), "xxh3_128") is None
    assert mapping.unwritten(address, len(data) - mapping._PAGE) is True


def test_page_flags_read_through_one_descriptor_say_the_same(tmp_path):
    path, data = _file(tmp_path)
    view = mapping.map_file(str(path))
    array = np.frombuffer(view, dtype=np.uint8)
    address = array.__array_interface__["data"][0]
    mapping.remember_blob(view, "xxh3_128", "cd" * 16)
    with mapping.pagemap() as flags:
        assert flags is not None
        assert mapping.unchanged_blob(address, len(data), "xxh3_128", flags) == "cd" * 16
        array[0] ^= 1  # the first page, read again through the same descriptor
        assert mapping.unchanged_blob(address, len(data), "xxh3_128", flags) is None
        assert mapping.unwritten(address + mapping._PAGE, len(data) - mapping._PAGE, flags) is True
        assert mapping.unwritten(address, len(data), flags) is False
    assert mapping.unwritten(address, len(data)) is False  # the same, read on its own


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="no /proc here")
def test_one_reading_of_the_maps_tells_files_from_private_anonymous_memory(tmp_path):
    import ctypes
    import mmap

    path = tmp_path / "file.bin"
    path.write_bytes(b"\0" * (1 << 20))
    view = mapping.map_file(str(path))
    private = mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    shared = mmap.mmap(-1, 1 << 20)
    try:
        maps = mapping.process_maps()
        address = {m: ctypes.addressof(ctypes.c_char.from_buffer(m)) for m in (private, shared)}
        file_start = ctypes.addressof(ctypes.c_char.from_buffer(view))

        def anonymous(start: int) -> bool:
            return any(lo <= start and start + (1 << 20) <= hi for lo, hi in maps.anonymous)

        assert anonymous(address[private])
        assert not anonymous(address[shared]) and not anonymous(file_start)
        assert any(m.start == file_start and m.path == str(path) for m in maps.files)
        assert maps.anonymous == sorted(maps.anonymous)
        assert all(a[1] < b[0] for a, b in zip(maps.anonymous, maps.anonymous[1:], strict=False))  # merged
    finally:
        del view
        gc.collect()
        private.close()
        shared.close()
