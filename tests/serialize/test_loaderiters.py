"""DataLoader iterators mid-epoch, checkpointed here and resumed in a new process in another folder:
the same batches left, the same next pass, and the session's random streams going on as an
uninterrupted twin's (the twin runs the same cell in that new process, in its own folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

import jupyter_pause as jp
from tests.support.elsewhere import build, resume_elsewhere

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("new_process")]

SEEDED = """
import random
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0); random.seed(0); np.random.seed(0)
"""

CELLS = {
    "single-process": SEEDED
    + """
loader = DataLoader(TensorDataset(torch.arange(20.0)), batch_size=3, shuffle=True)
it = iter(loader)
first = next(it)
""",
    "two workers": SEEDED
    + """
loader = DataLoader(TensorDataset(torch.arange(20.0)), batch_size=3, shuffle=True, num_workers=2)
it = iter(loader)
first = next(it)
""",
    "accelerate": SEEDED
    + """
from accelerate import Accelerator
accelerator = Accelerator(cpu=True)
loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(20.0)), batch_size=3, shuffle=True))
it = iter(loader)
first = next(it)
""",
    "lightning": "from lightning.pytorch.utilities import CombinedLoader\n"  # its import draws: before the seeds
    + SEEDED
    + """
loader = DataLoader(TensorDataset(torch.arange(20.0)), batch_size=3, shuffle=True)
it = iter(CombinedLoader({"a": loader}, "max_size_cycle"))
first = next(it)
""",
}

RESUME = (
    f"CELLS = {CELLS!r}\n"
    + r"""
import json, os, sys, warnings
warnings.filterwarnings("ignore")
import jupyter_pause as jp

def observe(ns):
    import random, numpy as np, torch
    seed = getattr(ns["it"], "_base_seed", None)
    left = []  # by next(): iter() of a CombinedLoader starts it again
    while True:
        try:
            batch = next(ns["it"])
        except StopIteration:
            break
        batch = batch[0]["a"] if isinstance(batch, tuple) else batch  # a CombinedLoader's (batch, index, loader)
        left.append(batch[0].tolist())
    draws = [torch.rand(2).tolist(), float(np.random.rand()), random.random()]
    return {"left": left, "draws": draws, "seed": seed, "next pass": [b[0].tolist() for b in ns["loader"]]}

store, name, twin_folder = sys.argv[1:]
ns = {"__name__": "__main__"}
cycle = jp.resume_and_verify(store=store, session="it", namespace=ns, write_report=False)
report = {"verdict": cycle.verdict.kind, "summary": cycle.verdict.summary(), "got": observe(ns)}
os.chdir(twin_folder)
twin = {"__name__": "__main__"}
exec(compile(CELLS[name], "<cell>", "exec", dont_inherit=True), twin)
report["twin"] = observe(twin)
print("REPORT " + json.dumps(report))
"""
)


@pytest.mark.parametrize("name", list(CELLS))
def test_an_iterator_mid_epoch_goes_on_as_an_uninterrupted_run(name: str, tmp_path: Path, monkeypatch) -> None:
    ns = build(CELLS[name], tmp_path / "a", monkeypatch)
    taken = jp.checkpoint(store=str(tmp_path / "store"), session="it", namespace=ns)
    assert not taken.manifest.skipped, taken.summary()

    got = resume_elsewhere(RESUME, tmp_path / "store", name, tmp_path, timeout=180)
    assert got["got"]["left"] == got["twin"]["left"]  # the same batches left, in the same order
    assert got["got"]["seed"] == got["twin"]["seed"]  # the same worker seeds
    assert got["got"]["draws"] == got["twin"]["draws"], got["summary"]  # torch, NumPy and random go on as the twin's
    assert got["got"]["next pass"] == got["twin"]["next pass"]
    assert got["verdict"] == "restored", got["summary"]


def test_the_live_iterator_goes_on_as_it_would_have(tmp_path: Path, monkeypatch) -> None:
    """Checkpointing drains the sampler's place; the notebook's own iterator and streams are untouched."""
    ns = build(CELLS["single-process"], tmp_path / "a", monkeypatch)
    twin = build(CELLS["single-process"], tmp_path / "b", monkeypatch)
    torch = ns["torch"]
    streams = (torch.get_rng_state(), ns["np"].random.get_state()[1].copy(), ns["random"].getstate())
    jp.checkpoint(store=str(tmp_path / "store"), session="it", namespace=ns)
    assert torch.equal(torch.get_rng_state(), streams[0]) and (ns["np"].random.get_state()[1] == streams[1]).all()
    assert ns["random"].getstate() == streams[2]
    assert [b[0].tolist() for b in ns["it"]] == [b[0].tolist() for b in twin["it"]]


def test_an_iterator_over_an_iterable_dataset_is_named(tmp_path: Path, monkeypatch) -> None:
    ns = build(
        SEEDED
        + """
class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(10))
it = iter(DataLoader(Stream(), batch_size=2))
next(it)
""",
        tmp_path / "a",
        monkeypatch,
    )
    taken = jp.checkpoint(["it"], store=str(tmp_path / "store"), session="it", namespace=ns)
    (record,) = taken.manifest.skipped
    assert record.name == "it" and "its place is inside the dataset's own iterator" in record.reason
