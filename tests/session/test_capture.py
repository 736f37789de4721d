"""What a checkpoint's capture reads of a model (``session.capture``): the model check of a module
none of whose storages changed is recorded again without a forward pass, and without reading
those storages a second time (their digests are the ones the checkpoint's blobs took)."""

from __future__ import annotations

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.proof import modelcheck
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))  # 2 MiB each


def _counting(monkeypatch) -> dict[str, int]:
    """Forward passes of model checks, and large storages a model check read to fingerprint."""
    counts = {"passes": 0, "read": 0}
    real_run, real_fingerprint = modelcheck.run, modelcheck._fingerprint

    def run(*args, **kwargs):
        counts["passes"] += 1
        return real_run(*args, **kwargs)

    def fingerprint(storage, known):
        key = (str(storage.device), storage.data_ptr(), storage.nbytes())
        counts["read"] += key not in known and storage.nbytes() >= 1 << 20
        return real_fingerprint(storage, known)

    monkeypatch.setattr(modelcheck, "run", run)
    monkeypatch.setattr(modelcheck, "_fingerprint", fingerprint)
    return counts


@pytest.mark.parametrize("taking", ["sync", "async"])
def test_an_unchanged_model_is_neither_run_nor_read_again_and_a_changed_one_is(tmp_path, monkeypatch, taking):
    counts = _counting(monkeypatch)
    ns = {"model": _model()}

    def take() -> jp.CheckpointResult:
        if taking == "sync":
            return jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
        return jp.checkpoint_async(store=str(tmp_path), session="s", namespace=ns).wait(60)

    take()
    assert counts == {"passes": 1, "read": 0}  # the blobs' digests stand for the storages
    take()
    assert counts == {"passes": 1, "read": 0}  # nothing changed: the same check, recorded again
    with torch.no_grad():
        ns["model"][0].weight[0, 0] += 1.0
    take()
    assert counts == {"passes": 2, "read": 0}
    ns["model"][2].bias.data[0] += 1.0  # past the version counters: no pass started early, one after
    take()
    assert counts == {"passes": 3, "read": 0}
    expected = ns["model"][0].weight.detach().clone(), ns["model"][2].bias.detach().clone()
    another_process()
    target: dict = {}
    cycle = jp.resume_and_verify(store=str(tmp_path), session="s", namespace=target, write_report=False)
    assert cycle.verdict.kind == "restored", cycle.verdict.details
    assert torch.equal(target["model"][0].weight, expected[0]) and torch.equal(target["model"][2].bias, expected[1])


def test_the_store_is_looked_at_before_the_first_checkpoint_of_a_process_only(tmp_path, monkeypatch):
    from jupyter_pause.store.storage import Store

    looks = []
    real = Store.check
    monkeypatch.setattr(Store, "check", lambda self: looks.append(self.url) or real(self))
    ns = {"x": 1}
    jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    assert len(looks) == 1  # the second one writes where the first did
    another_process()
    jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    assert len(looks) == 2
