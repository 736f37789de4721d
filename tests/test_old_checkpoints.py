"""Checkpoints written by an earlier release keep resuming: their pickle streams name module paths
of that release (``jupyter_pause.arrays``, ``jupyter_pause.reducers``), which must keep resolving."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch

import jupyter_pause as jp

RELEASES = Path(__file__).parent / "data"


def _resume_release(tmp_path: Path, release: str) -> tuple[dict, jp.Cycle]:
    store = tmp_path / release
    shutil.copytree(RELEASES / release, store)  # a resume writes its run report beside the checkpoint
    namespace: dict = {}
    cycle = jp.resume_and_verify(store=str(store), session="release", namespace=namespace)
    return namespace, cycle


def test_release_0_1_0_checkpoint_resumes_and_proves_itself(tmp_path, new_process):
    ns, cycle = _resume_release(tmp_path, "release-0.1.0")

    assert cycle.result.complete, cycle.result.summary()
    assert cycle.verdict.kind == "restored", cycle.verdict.summary()
    assert cycle.result.manifest.tag == "release 0.1.0"
    assert ns["count"] == 42 and ns["words"] == ["pause", "resume"]
    assert ns["table"] == {"a": 1.5, "b": (2, 3)}
    np.testing.assert_array_equal(ns["grid"], np.arange(12, dtype=np.float32).reshape(3, 4))
    assert torch.equal(ns["weights"], torch.linspace(0, 1, 5))
    # Notebook-defined code came back by value and works.
    assert ns["scaled"](5) == 15
    assert type(ns["point"]).__name__ == "Point" and ns["point"].norm2() == 25
    # The optimizer still trains the restored model, not a detached copy.
    model, opt = ns["model"], ns["opt"]
    assert opt.param_groups[0]["params"][0] is model.weight
    before = model.weight.detach().clone()
    model(torch.ones(3, 4)).sum().backward()
    opt.step()
    assert not torch.equal(before, model.weight.detach())
