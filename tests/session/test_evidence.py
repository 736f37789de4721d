"""What a checkpoint records for the restore test (``session.evidence``): a changed model's
forward pass runs on its eval-mode twin while the capture pickles and digests the live model in
its own mode; a model no twin can stand in for is switched to eval mode only after its digests
are taken, and its check then runs while the capture goes on."""

from __future__ import annotations

import contextlib
import threading

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.process import settings
from jupyter_pause.proof import modelcheck
from jupyter_pause.session import datafiles, evidence
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")

WAIT_S = 30


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.5), torch.nn.Linear(64, 8)).train()


def _watch(monkeypatch) -> tuple[list[str], threading.Event]:
    """What the capture does, in order: each pass of the model check (on the live model or a twin,
    and the live modes meanwhile), each digest, the pickling, the reading of the process settings.
    The event is set as a pass begins."""
    said: list[str] = []
    passing = threading.Event()
    real_digest, real_dump, real_keep = evidence._digest, datafiles.dump, settings.keep

    real_quiet = modelcheck._quiet

    @contextlib.contextmanager
    def quiet(module, device, stand_in=None):
        with real_quiet(module, device, stand_in) as running:
            on = "the live model" if running is module else "a twin"
            said.append(f"pass on {on} in eval mode: {not running.training}, live modes kept: {module.training}")
            passing.set()
            yield running

    def digest(value, known):
        said.append(f"digest of {type(value).__name__} (training: {getattr(value, 'training', None)})")
        return real_digest(value, known)

    def dump(*args, **kwargs):
        said.append("pickle")
        return real_dump(*args, **kwargs)

    def keep(*args, **kwargs):
        said.append(f"keep (a pass began: {passing.wait(WAIT_S)})")
        return real_keep(*args, **kwargs)

    monkeypatch.setattr(modelcheck, "_quiet", quiet)
    monkeypatch.setattr(evidence, "_digest", digest)
    monkeypatch.setattr(datafiles, "dump", dump)
    monkeypatch.setattr(settings, "keep", keep)
    return said, passing


def _resumes_in_train_mode(store: str) -> None:
    another_process()
    target: dict = {}
    cycle = jp.resume_and_verify(store=store, session="s", namespace=target, write_report=False)
    assert cycle.verdict.kind == "restored", cycle.verdict.details  # the digests taken in train mode hold
    assert cycle.verdict.models["model"].startswith("reproduces: ")
    assert target["model"].training


def test_a_changed_models_pass_runs_on_its_twin_while_the_live_model_is_pickled_in_its_mode(tmp_path, monkeypatch):
    ns = {"model": _model(), "step": 3}
    said, passing = _watch(monkeypatch)
    pickled = datafiles.dump

    def pickle_once_the_pass_began(*args, **kwargs):
        assert passing.wait(WAIT_S), "the model check's pass did not begin before the pickling"
        return pickled(*args, **kwargs)

    monkeypatch.setattr(datafiles, "dump", pickle_once_the_pass_began)
    jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)

    assert said[:2] == ["pass on a twin in eval mode: True, live modes kept: True", "pickle"]
    assert sorted(said[2:4]) == ["digest of Sequential (training: True)", "digest of int (training: None)"]
    assert said[4:] == ["keep (a pass began: True)"]  # one pass: the check recorded is the one run beside the pickling
    assert all(m.training for m in ns["model"].modules())
    _resumes_in_train_mode(str(tmp_path))


def test_a_model_no_twin_stands_in_for_is_switched_to_eval_mode_only_after_its_digests(tmp_path, monkeypatch):
    ns = {"model": _model(), "step": 3}
    object.__setattr__(ns["model"], "head", ns["model"][2].forward)  # reaches a submodule past the tree
    said, _ = _watch(monkeypatch)
    jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)

    assert said[:1] == ["pickle"]
    assert sorted(said[1:3]) == ["digest of Sequential (training: True)", "digest of int (training: None)"]
    assert said[3:] == [
        "pass on the live model in eval mode: True, live modes kept: False",
        "keep (a pass began: True)",
    ]
    assert all(m.training for m in ns["model"].modules())
    _resumes_in_train_mode(str(tmp_path))


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
