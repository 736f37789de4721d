"""GPU-bound blobs read into pinned memory and copied without waiting (``serialize.pinned``).

On a machine without CUDA, what must hold there: nothing is pinned, a blob bound for a device is
copied as before, and a process that cannot pin (torch without CUDA here, a small ``ulimit -l``
on a GPU node) still restores every byte. With a GPU (``-m gpu``): a resume reads its GPU blobs
into pinned memory, queues every copy, and gives the pinned memory back when it is done.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.serialize import pinned
from jupyter_pause.serialize.pinned import Uploads
from jupyter_pause.session import lineage
from jupyter_pause.store.buffers import allocating, buffer
from tests.support.devices import torch_blobs_on_a_stand_in_device

pytestmark = pytest.mark.usefixtures("no_pause_env")


def test_without_cuda_nothing_is_pinned_and_a_device_blob_is_copied_as_before(monkeypatch):
    moved = torch_blobs_on_a_stand_in_device(monkeypatch)
    uploads = Uploads({"gpu-blob": "cuda:0"})
    assert uploads.pinning is torch.cuda.is_available()
    if uploads.pinning:
        pytest.skip("this process can pin: the GPU test below covers it")
    assert uploads.into("gpu-blob") is None and uploads.into("cpu-blob") is None
    data = memoryview(np.arange(1000, dtype=np.uint8))
    assert uploads.place("cpu-blob", data) is data
    out = uploads.place("gpu-blob", data)
    assert bytes(out.numpy()) == bytes(data) and moved == [1000]
    uploads.finish()
    assert (uploads.pinned_bytes, uploads.queued_bytes) == (0, 0)


def test_a_process_that_cannot_pin_reads_into_ordinary_memory_and_stops_trying(monkeypatch, caplog):
    """Pinning refused (here: torch has no CUDA; on a GPU node: the page-lock limit): the bytes
    land in ordinary memory, every later blob is read as before, and the user is told once."""
    if torch.cuda.is_available():
        pytest.skip("pinning is refused only where this process has no CUDA")
    moved = torch_blobs_on_a_stand_in_device(monkeypatch)
    uploads = Uploads({"a": "cuda:0", "b": "cuda:0"})
    uploads.pinning = True  # as if CUDA were there: the first allocation finds it cannot pin
    allocate = uploads.into("a")
    assert allocate is not None
    with allocating(allocate):
        view = buffer(4096)
    assert len(view) == 4096 and not view.readonly and uploads.pinning is False
    (refused,) = [r for r in caplog.records if r.name == pinned.__name__]
    assert refused.levelname == "WARNING" and "could not page-lock 4096 bytes" in refused.getMessage()
    assert "ulimit -l" in refused.getMessage()
    view[:] = bytes(range(256)) * 16
    out = uploads.place("a", view)
    assert bytes(out.numpy()) == bytes(range(256)) * 16 and moved == [4096]
    assert uploads.into("b") is None
    uploads.finish()
    assert (uploads.pinned_bytes, uploads.queued_bytes) == (0, 0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
def test_a_gpu_resume_reads_into_pinned_memory_queues_its_copies_and_gives_the_memory_back(
    tmp_path, monkeypatch, sealed
):
    monkeypatch.setenv("JUPYTER_PAUSE_ENCRYPT", "1" if sealed else "0")
    if sealed:
        monkeypatch.setenv("JUPYTER_PAUSE_SIGNING_KEY", "gpu test key 4c1a")
    lineage.forget()
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)]).cuda()
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(8, 512, device="cuda")).sum().backward()
    opt.step()
    jp.checkpoint(store=str(tmp_path), session="pin", namespace={"model": model, "opt": opt})
    torch.cuda.synchronize()
    held_before = torch.cuda.host_memory_stats().get("allocated_bytes.current", 0)
    before = dict(pinned.TOTALS)
    lineage.forget()
    target: dict = {}
    jp.resume(store=str(tmp_path), session="pin", namespace=target)
    state = sum(p.numel() * 4 for p in model.parameters()) * 3  # parameters and AdamW's two moments
    assert pinned.TOTALS["pinned"] - before["pinned"] >= state
    assert pinned.TOTALS["queued"] - before["queued"] >= state
    for mine, theirs in zip(target["model"].parameters(), model.parameters(), strict=True):
        assert mine.device.type == "cuda" and torch.equal(mine, theirs)
    for key, value in opt.state_dict()["state"][0].items():
        assert torch.equal(target["opt"].state_dict()["state"][0][key], value), key
    assert torch.cuda.host_memory_stats().get("allocated_bytes.current", 0) <= held_before
