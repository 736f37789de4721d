"""What a checkpoint records for the restore test (``session.evidence``): the value digests are
taken before the model checks put the modules in eval mode, and the checks then run while the
capture goes on."""

from __future__ import annotations

import threading

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.process import settings
from jupyter_pause.proof import modelcheck
from jupyter_pause.serialize.digests import value_digest
from jupyter_pause.session import evidence
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")

WAIT_S = 30


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.5), torch.nn.Linear(64, 8)).train()


def test_digests_come_first_and_the_model_checks_run_beside_the_rest_of_the_capture(tmp_path, monkeypatch):
    said: list[str] = []
    checking = threading.Event()
    real_digest, real_record, real_keep = evidence._digest, modelcheck.record, settings.keep

    def digest(value, known):
        said.append("digest")
        return real_digest(value, known)

    def record(module, known=None):
        said.append(f"check (training: {module.training})")
        checking.set()
        return real_record(module, known)

    def keep(*args, **kwargs):
        # The checks start before the process settings are read: this waits for them to.
        said.append(f"keep (checks started: {checking.wait(WAIT_S)})")
        return real_keep(*args, **kwargs)

    monkeypatch.setattr(evidence, "_digest", digest)
    monkeypatch.setattr(modelcheck, "record", record)
    monkeypatch.setattr(settings, "keep", keep)
    ns = {"model": _model(), "step": 3}
    result = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)

    assert said == ["digest", "digest", "check (training: True)", "keep (checks started: True)"]
    recorded = {v.name: v.digest for v in result.manifest.variables}
    assert recorded["model"] == value_digest(ns["model"])  # in train mode, as the notebook has it
    assert all(m.training for m in ns["model"].modules())
    another_process()
    target: dict = {}
    cycle = jp.resume_and_verify(store=str(tmp_path), session="s", namespace=target, write_report=False)
    assert cycle.verdict.kind == "restored", cycle.verdict.details
    assert cycle.verdict.models["model"].startswith("reproduces: ")
    assert target["model"].training


class NeedsTwo(torch.nn.Module):
    """A module no probe input can be built for: its forward takes two tensors of no known shape."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))

    def forward(self, a, b):
        return a * self.weight + b


def test_a_module_the_check_cannot_run_is_named_and_the_others_are_still_checked(tmp_path):
    ns = {"odd": NeedsTwo(), "model": _model()}
    result = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    named = [line for line in result.summary().splitlines() if "cannot prove model" in line]
    assert len(named) == 1 and "odd" in named[0], result.summary()
    another_process()
    target: dict = {}
    cycle = jp.resume_and_verify(store=str(tmp_path), session="s", namespace=target, write_report=False)
    assert cycle.verdict.models["odd"].startswith("not possible: ")
    assert cycle.verdict.models["model"].startswith("reproduces: ")
    assert torch.equal(target["odd"].weight, torch.ones(3))
