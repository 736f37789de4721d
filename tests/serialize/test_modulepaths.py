"""An extension's submodule that its name does not lead back to comes back as its package's attribute."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

import jupyter_pause as jp
from jupyter_pause.serialize.modulepaths import address, find
from tests.support.dumping import resume_elsewhere
from tests.support.processes import another_process

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import trainers  # noqa: E402  (a module named "trainers", made by the Rust extension)


def test_a_submodule_made_by_an_extension_is_found_as_its_package_attribute() -> None:
    assert trainers.__name__ == "trainers" and "trainers" not in sys.modules
    # tokenizers:trainers, or tokenizers.trainers:trainers once its Python wrapper is imported (it holds the module too)
    assert address(trainers).split(":") in (["tokenizers", "trainers"], ["tokenizers.trainers", "trainers"])
    assert find(address(trainers)) is trainers
    assert address(types) == "types" and find("types") is types


def test_the_notebook_namespace_is_never_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a kernel the notebook's namespace is also ``__mp_main__``, and it holds ``trainers`` too."""
    notebook = types.ModuleType("__mp_main__")
    notebook.trainers = trainers
    monkeypatch.setitem(sys.modules, "__mp_main__", notebook)
    assert address(trainers).startswith("tokenizers") and find(address(trainers)) is trainers


@pytest.mark.usefixtures("new_process")
def test_a_namespace_binding_one_resumes_with_it(tmp_path: Path) -> None:
    ns = {"trainers": trainers, "n": 1}
    manifest = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    another_process()
    target: dict = {}
    result = jp.resume(manifest.id, store=str(tmp_path), session="s", namespace=target)
    assert result.skipped == {}
    assert target["trainers"] is trainers and target["trainers"].BpeTrainer.__name__ == "BpeTrainer"


@pytest.mark.integration  # a new process
def test_a_value_holding_one_comes_back_with_it_in_a_new_process(tmp_path: Path) -> None:
    out = resume_elsewhere({"kit": {"trainers": trainers}}, "out = kit['trainers'].BpeTrainer.__name__", tmp_path)
    assert out == "BpeTrainer"
