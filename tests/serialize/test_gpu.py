"""CUDA round trips (run where a GPU is visible; skipped elsewhere)."""

from __future__ import annotations

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.session import lineage

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_cuda_state_goes_back_to_the_gpu(tmp_path):
    lineage.forget()
    model = torch.nn.Linear(64, 64).cuda()
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(8, 64, device="cuda")).sum().backward()
    opt.step()
    torch.cuda.manual_seed_all(5)
    ns = {"model": model, "opt": opt}
    jp.checkpoint(store=str(tmp_path), session="gpu", namespace=ns)
    expected = torch.rand(3, device="cuda")
    lineage.forget()
    target: dict = {}
    jp.resume(store=str(tmp_path), session="gpu", namespace=target)
    assert next(target["model"].parameters()).device.type == "cuda"
    assert torch.equal(target["model"].weight, model.weight)
    assert target["opt"].param_groups[0]["params"][0] is target["model"].weight
    assert torch.equal(torch.rand(3, device="cuda"), expected)
    on_cpu: dict = {}
    jp.resume(store=str(tmp_path), session="gpu", namespace=on_cpu, map_location="cpu")
    assert on_cpu["model"].weight.device.type == "cpu"
    assert torch.equal(on_cpu["model"].weight, model.weight.cpu())


def test_device_storages_come_to_host_in_one_pinned_batch():
    from jupyter_pause.serialize.arrays import ArrayCollector

    collector = ArrayCollector()
    tensors = [torch.randn(1000, device="cuda"), torch.arange(10, device="cuda")]
    for t in tensors:
        collector.reduce_torch_storage(t.untyped_storage())
    assert all(f.data is None for f in collector.found.values())
    collector.gather()
    for t, found in zip(tensors, collector.found.values(), strict=True):
        assert bytes(found.data) == t.cpu().numpy().tobytes()
        assert found.keepalive.is_pinned()


def test_cuda_value_digests_reuse_blob_hashes_and_match_from_scratch(tmp_path):
    from jupyter_pause.serialize.digests import value_digest

    lineage.forget()
    model = torch.nn.Linear(1024, 1024).cuda()
    ns = {"model": model, "opt": torch.optim.Adam(model.parameters()), "w": torch.randn(2_000_000, device="cuda")}
    manifest = jp.checkpoint(store=str(tmp_path), session="gpu", namespace=ns).manifest
    for record in manifest.variables:
        assert record.digest == value_digest(ns[record.name]), record.name


def test_async_checkpoint_of_cuda_state_restores_like_a_sync_one(tmp_path):
    lineage.forget()
    ns = {"w": torch.randn(3_000_000, device="cuda")}
    expected = ns["w"].clone()
    job = jp.checkpoint_async(store=str(tmp_path), session="gpu", namespace=ns)
    ns["w"].add_(1)  # after the copy: must not reach the checkpoint
    manifest = job.wait(120).manifest
    lineage.forget()
    target: dict = {}
    jp.resume(manifest.id, store=str(tmp_path), session="gpu", namespace=target)
    assert target["w"].device.type == "cuda" and torch.equal(target["w"], expected)


def test_the_gpu_check_script_passes(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks/gpu_check.py"
    done = subprocess.run(
        [sys.executable, str(script), "--size-gb", "0.2"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _mlp(dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 256), torch.nn.LayerNorm(256)]
    return torch.nn.Sequential(*layers).to(device="cuda", dtype=dtype)


@pytest.mark.parametrize(("then", "now"), [(False, True), (True, False)])
def test_a_resume_under_another_tf32_setting_is_restored_within_its_tolerance(tmp_path, new_process, then, now):
    from tests.support.processes import another_process

    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = then
        jp.checkpoint(store=str(tmp_path), session="tf32", namespace={"model": _mlp()})
        another_process()
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = now
        cycle = jp.resume_and_verify(store=str(tmp_path), session="tf32", namespace={})
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    assert cycle.verdict.kind == "restored", cycle.verdict.summary()
    said = cycle.verdict.models["model"]
    assert said.startswith(("reproduces: output bit-identical", "reproduces: output within fp32 with TF32")), said


def test_a_bf16_model_is_restored_within_the_bf16_tolerance(tmp_path, new_process):
    from tests.support.processes import another_process

    jp.checkpoint(store=str(tmp_path), session="bf16", namespace={"model": _mlp(torch.bfloat16)})
    another_process()
    cycle = jp.resume_and_verify(store=str(tmp_path), session="bf16", namespace={})
    assert cycle.verdict.kind == "restored", cycle.verdict.summary()
    assert cycle.verdict.models["model"].startswith(
        ("reproduces: output bit-identical", "reproduces: output within bf16")
    )


def test_a_cuda_checkpoint_resumed_on_the_cpu_is_restored_within_the_fp32_tolerance(tmp_path, new_process):
    from tests.support.processes import another_process

    jp.checkpoint(store=str(tmp_path), session="moved", namespace={"model": _mlp()})
    another_process()
    cycle = jp.resume_and_verify(store=str(tmp_path), session="moved", namespace={}, map_location="cpu")
    assert cycle.verdict.kind == "restored", cycle.verdict.summary()
    assert "recorded on cuda:0" in cycle.verdict.models["model"]


@pytest.mark.parametrize("pinned_by", ["torch", "cudaHostRegister"])
def test_host_memory_a_gpu_writes_is_never_skipped_by_write_tracking(tmp_path, pinned_by):
    """A copy from the GPU into pinned host memory is the device's write, not the CPU's: the
    kernel records nothing, so a pinned array must be hashed at every checkpoint."""
    from jupyter_pause.serialize import uffd

    if uffd.watcher() is None:
        pytest.skip("this kernel cannot track writes")
    lineage.forget()
    if pinned_by == "torch":
        host = torch.zeros(1 << 20).pin_memory()
    else:
        host = torch.zeros(1 << 20)
        assert torch.cuda.cudart().cudaHostRegister(host.data_ptr(), host.nbytes, 0) == 0
    ns = {"host": host, "plain": torch.ones(1 << 20)}
    jp.checkpoint(store=str(tmp_path), session="gpu", namespace=ns)
    unchanged = jp.checkpoint(store=str(tmp_path), session="gpu", namespace=ns).manifest
    assert unchanged.stats["bytes_unread"] == 4 << 20  # "plain" only
    host.copy_(torch.full((1 << 20,), 3.0, device="cuda"), non_blocking=True)
    torch.cuda.synchronize()
    changed = jp.checkpoint(store=str(tmp_path), session="gpu", namespace=ns).manifest
    lineage.forget()
    back: dict = {}
    jp.resume(changed.id, store=str(tmp_path), session="gpu", namespace=back, map_location="cpu")
    assert torch.equal(back["host"], torch.full((1 << 20,), 3.0))
    if pinned_by == "cudaHostRegister":
        torch.cuda.cudart().cudaHostUnregister(host.data_ptr())
