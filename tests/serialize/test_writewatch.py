"""Write tracking between checkpoints: what nothing wrote is not read again, and no write, however
it was made, is missed; memory another process or a device may write is always hashed."""

from __future__ import annotations

import ctypes
import mmap
import multiprocessing
import os
import threading

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.serialize import uffd, writewatch
from jupyter_pause.store import mapping
from tests.support.damage import KEY
from tests.support.processes import another_process

pytestmark = [
    pytest.mark.usefixtures("new_process"),
    pytest.mark.skipif(uffd.watcher() is None, reason="this kernel cannot track writes (Linux 6.7 or later can)"),
]

T_BYTES = 4_000_000  # float32 elements below
A_BYTES = 2_400_000


def _state() -> dict:
    torch.manual_seed(0)
    return {"t": torch.randn(T_BYTES // 4), "a": np.random.default_rng(0).random(A_BYTES // 8), "n": 1}


def _save(store, ns: dict, config: PauseConfig | None = None):
    return jp.checkpoint(store=str(store), session="s", namespace=ns, config=config).manifest


def _resumed(store, checkpoint_id: str) -> dict:
    another_process()
    back: dict = {}
    jp.resume(checkpoint_id, store=str(store), session="s", namespace=back)
    return back


def test_what_nothing_wrote_is_not_read_again(tmp_path):
    ns = _state()
    first = _save(tmp_path, ns)
    assert first.stats["bytes_unread"] == 0  # a fresh session: everything hashed
    ns["n"] = 2
    second = _save(tmp_path, ns)
    assert second.stats["bytes_unread"] >= T_BYTES + A_BYTES
    assert second.stats["bytes_written"] < 100_000
    back = _resumed(tmp_path, second.id)
    assert torch.equal(back["t"], ns["t"]) and np.array_equal(back["a"], ns["a"]) and back["n"] == 2


def _kernel_copy(ns, tmp_path):  # read() fills the array from inside the kernel
    source = tmp_path / "bytes"
    source.write_bytes(np.full(1000, 7.0).tobytes())
    with open(source, "rb") as f:
        assert f.readinto(memoryview(ns["a"]).cast("B")[8000:16000]) == 8000


def _another_thread(ns, tmp_path):
    writer = threading.Thread(target=ns["t"].__setitem__, args=(123_456, 9.0))
    writer.start()
    writer.join()


def _memmove(ns, tmp_path):
    ctypes.memmove(ns["t"].data_ptr() + 400, np.float32(-2.0).tobytes(), 4)


def _torch_out(ns, tmp_path):
    torch.add(ns["t"], 1.0, out=ns["t"])


def _one_bit(ns, tmp_path):
    ns["a"].view(np.uint8)[A_BYTES // 2] ^= 1


def _first_byte(ns, tmp_path):  # in a page shared with what lies before the array
    ns["t"].view(torch.uint8)[0] ^= 1


def _last_byte(ns, tmp_path):
    ns["a"].view(np.uint8)[-1] ^= 1


WRITES = [_kernel_copy, _another_thread, _memmove, _torch_out, _one_bit, _first_byte, _last_byte]


@pytest.mark.parametrize("write", WRITES, ids=lambda f: f.__name__[1:])
def test_a_write_to_a_tracked_array_is_never_missed(tmp_path, write):
    ns = _state()
    _save(tmp_path, ns)
    assert _save(tmp_path, ns).stats["bytes_unread"] >= T_BYTES + A_BYTES  # both tracked
    write(ns, tmp_path)
    changed = _save(tmp_path, ns)
    assert changed.stats["bytes_unread"] in (T_BYTES, A_BYTES)  # the other one only
    back = _resumed(tmp_path, changed.id)
    assert torch.equal(back["t"], ns["t"]) and np.array_equal(back["a"], ns["a"])


def test_another_array_at_a_freed_arrays_address_is_hashed(tmp_path):
    """A digest belongs to one array: another one at the same address, even with nothing written
    since, is hashed; and once the pages are dropped (they read back as zeros) its bytes are."""
    memory = mmap.mmap(-1, 4 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    ns = {"a": np.frombuffer(memory, dtype=np.float64)}
    ns["a"][:] = 1.5
    _save(tmp_path, ns)
    assert _save(tmp_path, ns).stats["bytes_unread"] == 4 << 20  # tracked
    ns["a"] = np.frombuffer(memory, dtype=np.float64)  # another array on the same bytes
    assert _save(tmp_path, ns).stats["bytes_unread"] == 0
    del ns["a"]
    memory.madvise(mmap.MADV_DONTNEED)
    ns["a"] = np.frombuffer(memory, dtype=np.float64)
    again = _save(tmp_path, ns)
    assert again.stats["bytes_unread"] == 0
    back = _resumed(tmp_path, again.id)
    assert not back["a"].any()
    ns.clear()
    del back
    memory.close()


def _write_in_another_process(target) -> None:
    process = multiprocessing.get_context("fork").Process(target=target)
    process.start()
    process.join()
    assert process.exitcode == 0


def _shared(kind: str) -> tuple[object, mmap.mmap | None]:
    if kind == "torch shared memory":
        return torch.zeros(1 << 20).share_memory_(), None
    memory = mmap.mmap(-1, 4 << 20)  # MAP_SHARED
    return np.frombuffer(memory, dtype=np.float32), memory


@pytest.mark.parametrize("kind", ["torch shared memory", "numpy on a shared mapping"])
def test_memory_another_process_writes_is_always_hashed(tmp_path, kind):
    ns: dict = {}
    ns["v"], memory = _shared(kind)
    _save(tmp_path, ns)
    assert _save(tmp_path, ns).stats["bytes_unread"] == 0  # never tracked
    _write_in_another_process(lambda: ns["v"].__setitem__(77, 3.0))
    assert ns["v"][77] == 3.0
    changed = _save(tmp_path, ns)
    assert _resumed(tmp_path, changed.id)["v"][77] == 3.0
    ns.clear()
    if memory is not None:
        memory.close()


def test_an_array_written_is_hashed_until_it_stays_unchanged(tmp_path):
    """Hot memory is not kept protected (its writes would fault): it is hashed at each checkpoint,
    armed again once two checkpoints agree, and skipped from the one after."""
    ns = _state()
    _save(tmp_path, ns)
    ns["t"][0] += 1.0
    unread = [_save(tmp_path, ns).stats["bytes_unread"] for _ in range(4)]
    assert unread == [A_BYTES, A_BYTES, A_BYTES, T_BYTES + A_BYTES]
    ns["t"][1] += 1.0  # written again once settled: seen
    changed = _save(tmp_path, ns)
    assert changed.stats["bytes_unread"] == A_BYTES
    assert torch.equal(_resumed(tmp_path, changed.id)["t"], ns["t"])


def test_signed_checkpoints_reuse_only_digests_of_their_own_algorithm(tmp_path):
    ns = _state()
    _save(tmp_path / "plain", ns)  # xxh3 digests, tracked
    signed = PauseConfig(signing_key=KEY)
    first = _save(tmp_path / "signed", ns, signed)
    assert first.stats["bytes_unread"] == 0  # sha256 is another digest: hashed
    second = _save(tmp_path / "signed", ns, signed)
    assert second.stats["bytes_unread"] >= T_BYTES + A_BYTES
    another_process()
    back: dict = {}
    jp.resume(second.id, store=str(tmp_path / "signed"), session="s", namespace=back, config=signed)
    assert torch.equal(back["t"], ns["t"])


def test_tracking_switched_off_reads_everything(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PAUSE_TRACK_WRITES", "off")
    ns = _state()
    _save(tmp_path, ns, PauseConfig())
    assert _save(tmp_path, ns, PauseConfig()).stats["bytes_unread"] == 0
    monkeypatch.setenv("JUPYTER_PAUSE_TRACK_WRITES", "sometimes")
    with pytest.raises(jp.PauseError, match="JUPYTER_PAUSE_TRACK_WRITES is on or off"):
        PauseConfig()


def test_a_forked_process_starts_with_nothing_tracked(tmp_path):
    ns = _state()
    _save(tmp_path, ns)

    def child() -> None:
        os._exit(0 if _save(tmp_path / "child", ns).stats["bytes_unread"] == 0 else 1)

    _write_in_another_process(child)
    assert _save(tmp_path, ns).stats["bytes_unread"] >= T_BYTES + A_BYTES  # the parent still is


def test_without_a_watcher_every_array_is_hashed(tmp_path, monkeypatch):
    monkeypatch.setattr(uffd, "watcher", lambda: None)
    ns = _state()
    _save(tmp_path, ns)
    ns["t"][5] = 1.0
    second = _save(tmp_path, ns)
    assert second.stats["bytes_unread"] == 0
    assert torch.equal(_resumed(tmp_path, second.id)["t"], ns["t"])


def test_a_write_the_kernel_did_not_record_is_caught_and_tracking_switched_off(tmp_path, monkeypatch):
    """The kernel's record is checked against the bytes of arrays it lets a checkpoint skip: one
    it got wrong (here every write goes unrecorded) makes the checkpoint hash everything, says
    so, and ends tracking in this process."""
    monkeypatch.setattr(writewatch, "_off", "")  # back on after the test
    ns = _state()
    _save(tmp_path, ns)
    assert _save(tmp_path, ns).stats["bytes_unread"] >= T_BYTES + A_BYTES
    monkeypatch.setattr(uffd.Watcher, "written", lambda self, start, end: False)
    ns["t"][500_000] = 5.0  # inside its pages, not in the bytes it shares with its neighbours
    result = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    assert result.manifest.stats["bytes_unread"] == 0
    assert any("changed without the kernel recording a write" in n and "off in this kernel" in n for n in result.notes)
    assert "write tracking is off" in result.summary()
    assert _save(tmp_path, ns).stats["bytes_unread"] == 0  # and stays off
    assert torch.equal(_resumed(tmp_path, result.manifest.id)["t"], ns["t"])


def test_a_device_runtime_torch_does_not_drive_turns_tracking_off():
    """Host memory a device writes through a pinning torch cannot name (another library drives
    the GPU) is never skipped: with such a runtime loaded, nothing is tracked."""
    anonymous = [(1 << 20, 2 << 20)]

    def maps(*paths: str) -> mapping.ProcessMaps:
        files = [mapping.FileMapping(1 << 30, (1 << 30) + 4096, 0, 1, i + 1, p) for i, p in enumerate(paths)]
        return mapping.ProcessMaps(files, anonymous)

    assert writewatch.memory(maps("/usr/lib/libc.so.6")) == anonymous
    if torch.cuda.is_initialized():
        pytest.skip("torch drives CUDA in this process: it names pinned memory itself")
    assert writewatch.memory(maps("/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05")) is None
    assert writewatch.memory(maps("/opt/rocm/lib/libamdhip64.so.6")) is None


def test_audits_take_the_skipped_arrays_in_turn_within_their_budget(monkeypatch):
    """A checkpoint hashes about ``AUDIT_BYTES`` of what it skips: small arrays several at a time,
    a large one once the credit of a few checkpoints covers it, every array in its turn."""
    monkeypatch.setattr(writewatch, "AUDIT_BYTES", 10)
    monkeypatch.setattr(writewatch, "_audits", 0)
    monkeypatch.setattr(writewatch, "_credit", 0)
    hashed: list[str] = []
    monkeypatch.setattr(writewatch.signing, "digest", lambda data, algorithm: hashed.append(bytes(data)) or "d")
    data = {"a1": b"1" * 4, "a2": b"2" * 4, "a3": b"3" * 25}
    watched = writewatch.Watched(known=dict.fromkeys(data, "d"), algorithm="xxh3_128")
    turns = []
    for _ in range(5):
        hashed.clear()
        assert writewatch._audit(watched, data) == ""
        turns.append(sorted(h[:1].decode() for h in hashed))
    assert turns == [["1", "2"], [], [], ["1", "3"], ["2"]]  # the 25 bytes wait for their credit
    watched.known["a1"] = "stale"
    assert [writewatch._audit(watched, data) for _ in range(3)] in (["", "a1", ""], ["a1", "", ""], ["", "", "a1"])


def test_no_accelerator_is_asked_about_pinned_memory_while_torch_drives_none(tmp_path, monkeypatch):
    """``is_pinned`` creates a CUDA context in some torch versions: a checkpoint on a GPU node
    that has not used the GPU must not take one just to track writes."""

    def refuse(self, *args, **kwargs):
        raise AssertionError("is_pinned was asked while torch drives no accelerator")

    if writewatch._accelerated():
        pytest.skip("torch drives an accelerator in this process")
    monkeypatch.setattr(torch.UntypedStorage, "is_pinned", refuse)
    monkeypatch.setattr(torch.Tensor, "is_pinned", refuse)
    ns = _state()
    _save(tmp_path, ns)
    assert _save(tmp_path, ns).stats["bytes_unread"] >= T_BYTES + A_BYTES


def test_with_every_place_taken_the_array_seen_longest_ago_makes_room(tmp_path, monkeypatch):
    monkeypatch.setattr(writewatch, "MAX_TRACKED", 1)
    old, new = {"t": torch.randn(1 << 20)}, {"u": torch.randn(1 << 20)}
    _save(tmp_path, old)
    assert _save(tmp_path, old).stats["bytes_unread"] == 4 << 20  # tracked, the only place taken
    _save(tmp_path, new)  # old is still alive, but this checkpoint does not have it: it makes room
    assert _save(tmp_path, new).stats["bytes_unread"] == 4 << 20
    both = {**old, **new}
    _save(tmp_path, both)
    assert _save(tmp_path, both).stats["bytes_unread"] == 4 << 20  # one place, and both are seen: one is tracked
