"""Checkpoints written by an earlier layout of the package keep resuming: their pickle streams name
module paths of that layout (``jupyter_pause.arrays``, ``jupyter_pause.engine.resumable``), which
must keep resolving. Each store under ``tests/data`` was written by ``make_release_checkpoint.py``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from tests.support.processes import OLDER_PROCESSOR

RELEASES = Path(__file__).resolve().parents[1] / "data"


def _resume_release(tmp_path: Path, release: str, session: str = "release") -> tuple[dict, jp.Cycle]:
    store = tmp_path / release
    shutil.copytree(RELEASES / release, store)  # a resume writes its run report beside the checkpoint
    namespace: dict = {}
    cycle = jp.resume_and_verify(store=str(store), session=session, namespace=namespace)
    return namespace, cycle


@pytest.mark.parametrize(("release", "tag"), [("release-0.1.0", "release 0.1.0"), ("engine-layout", "engine layout")])
def test_an_older_layouts_checkpoint_resumes_and_proves_itself(tmp_path, new_process, release, tag):
    ns, cycle = _resume_release(tmp_path, release)

    assert cycle.result.complete, cycle.result.summary()
    assert cycle.verdict.kind == "restored", cycle.verdict.summary()
    assert cycle.result.manifest.tag == tag
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


def test_a_loop_checkpointed_by_the_engine_layout_continues_at_its_batch(tmp_path, new_process):
    """Its loop positions (the shuffled loader's state, pickled by ``engine/resumable.py``) come
    back: the loop run again yields, from the batch the checkpoint was taken in (its body had not
    finished), the batches an uninterrupted run would have yielded."""
    torch.manual_seed(11)
    uninterrupted = [b.tolist() for b in torch.utils.data.DataLoader(torch.arange(10), batch_size=2, shuffle=True)]

    ns, cycle = _resume_release(tmp_path, "engine-layout", session="loop")

    assert cycle.verdict.kind == "restored", cycle.verdict.summary()
    assert ns["seen"] == uninterrupted[:3]
    assert "loops were at batches 2" in cycle.result.summary()
    loader = torch.utils.data.DataLoader(torch.arange(10), batch_size=2, shuffle=True)
    rest = [b.tolist() for b in jp.steps(loader, name="batches")]
    assert rest == uninterrupted[2:]


_RESUME = """
import json, sys
import jupyter_pause as jp
cycle = jp.resume_and_verify(store=sys.argv[1], session="release", namespace={})
print("REPORT " + json.dumps({"kind": cycle.verdict.kind, "summary": cycle.verdict.summary()}))
"""


@pytest.mark.integration
@pytest.mark.parametrize("release", ["release-0.1.0", "engine-layout"])
def test_an_older_layouts_checkpoint_is_restored_on_another_processor(tmp_path, release):
    """The fixtures were written on one machine's CPU kernels; a process with torch's plain
    kernels (an older processor) computes the model check's output in other last bits."""
    store = tmp_path / release
    shutil.copytree(RELEASES / release, store)
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, **OLDER_PROCESSOR, "PYTHONPATH": root}
    proc = subprocess.run([sys.executable, "-c", _RESUME, str(store)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("REPORT "))[len("REPORT ") :])
    assert report["kind"] == "restored", report["summary"]
    assert "model outputs " in report["summary"]
