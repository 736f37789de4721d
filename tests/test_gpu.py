"""CUDA round trips (run where a GPU is visible; skipped elsewhere)."""

from __future__ import annotations

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause import lineage

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
