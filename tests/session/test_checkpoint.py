"""Taking a checkpoint (``session.checkpoint``): while the kernel waits for one, Python's cyclic
garbage collector does not run (a full collection walks every object of the kernel), and it is
left as it was found."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import numpy as np
import pytest

import jupyter_pause as jp

pytestmark = pytest.mark.usefixtures("new_process")


#: Where a checkpoint does its work: no collection may start with one of these on the stack.
WORK = tuple(f"jupyter_pause/{part}" for part in ("session/capture.py", "serialize/", "store/writer.py", "proof/"))


@pytest.fixture
def collections():
    """The collections the cyclic garbage collector starts while the test runs inside a
    checkpoint's work (the files of ``WORK`` on the stack), by generation."""
    started: list[int] = []

    def note(phase: str, info: dict) -> None:
        frame = sys._getframe(1)
        while frame is not None and phase == "start":
            if any(part in frame.f_code.co_filename for part in WORK):
                started.append(info["generation"])
                return
            frame = frame.f_back

    gc.callbacks.append(note)
    yield started
    gc.callbacks.remove(note)


def _namespace() -> dict:
    """Enough objects that pickling and digesting them would set off collections."""
    return {"rows": [{"i": i, "s": str(i), "l": [i, i + 1]} for i in range(30_000)], "a": np.arange(1 << 18)}


@pytest.mark.parametrize("taking", ["sync", "async"])
def test_no_collection_runs_while_the_kernel_waits_and_the_collector_is_left_as_it_was(tmp_path, collections, taking):
    ns = _namespace()
    jp.checkpoint_async(store=str(tmp_path), session="warm", namespace={"x": 1}).wait(60)  # imports done
    gc.collect()
    collections.clear()
    if taking == "sync":
        jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
        assert collections == []
    else:
        job = jp.checkpoint_async(store=str(tmp_path), session="s", namespace=ns)
        assert collections == []  # the kernel's part; the writing thread runs with the collector on
        job.wait(60)
    assert gc.isenabled()
    gc.disable()
    try:
        jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
        assert not gc.isenabled()  # left off, as the notebook had it
    finally:
        gc.enable()


def test_a_checkpoint_of_tensors_names_the_files_torch_was_imported_from(tmp_path):
    import torch

    folder = Path(torch.__file__).parent
    files = jp.checkpoint(store=str(tmp_path), session="t", namespace={"w": torch.ones(4)}).manifest.import_files
    assert list(files) == ["torch"] and "__init__.py" in files["torch"] and len(files["torch"]) > 100
    assert all((folder / relative).is_file() for relative in files["torch"])  # relative to torch's folder
    without = jp.checkpoint(store=str(tmp_path), session="n", namespace={"a": np.arange(3)}).manifest
    assert without.import_files == {}  # torch is loaded, but restoring these values does not need it
