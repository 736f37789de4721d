"""Objects that keep their state in their class come back sharing it, in a new process and here."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_pause.proof.rehearsal import rehearse_one
from jupyter_pause.serialize.arrays import ArrayLoader
from jupyter_pause.serialize.digests import value_digest
from jupyter_pause.serialize.pickler import load_variables
from tests.support import classstate
from tests.support.dumping import dump, notebook, pick, resume_elsewhere

BORG = """
class Borg:
    _shared = {}
    def __init__(self):
        self.__dict__ = self._shared

class Single:
    _instance = None
    def __init__(self):
        Single._instance = self
        self.steps = 0

first, second = Borg(), Borg()
first.step = 3
single = Single()
single.steps = 7
"""

SHARING = """
first.step += 1
out = [second.step, first.__dict__ is Borg._shared, Borg().step, single is Single._instance, single.steps]
"""


@pytest.mark.integration  # a new process
def test_borg_instances_share_their_class_state_after_a_resume(tmp_path: Path) -> None:
    ns = notebook(BORG)
    assert resume_elsewhere(pick(ns, "Borg Single first second single"), SHARING, tmp_path) == [4, True, 4, True, 7]


def test_the_checkpoint_state_wins_over_what_the_class_holds_at_load() -> None:
    first, single = classstate.Borg(), classstate.Single()
    first.step, single.steps = 3, 7
    _, segments, records, blobs = dump({"first": first, "single": single})
    earlier = classstate.Borg()  # made before the load: it sees the restored state too
    first.step, single.steps = 99, 99  # the class set up again before the resume
    try:
        loaded, failed = load_variables(segments, ArrayLoader(records, blobs), {"__name__": "__main__"})
        seen = [earlier.step, loaded["first"].step, loaded["first"].__dict__ is earlier.__dict__]
    finally:
        classstate.Borg._shared.clear()
    assert failed == {} and seen == [3, 3, True]
    assert loaded["single"] is classstate.Single._instance is single and single.steps == 7


def test_a_rehearsal_leaves_the_live_class_state_alone() -> None:
    ns = notebook(BORG)
    items = ns["first"].items = [1, 2]
    with pytest.raises(Exception, match="attach"):  # not rehearsed: it would fill the live class
        rehearse_one("first", ns["first"], "pickle", value_digest(ns["first"]))
    assert ns["Borg"]._shared["items"] is items


ACCELERATE = """
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelerate import Accelerator

accelerator = Accelerator(cpu=True)
aloader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2))
"""

ACCELERATE_NEXT = """
from accelerate.state import AcceleratorState, GradientState
out = [
    accelerator.gradient_state.__dict__ is aloader.gradient_state.__dict__,
    accelerator.gradient_state.__dict__ is GradientState._shared_state,
    accelerator.state.__dict__ is AcceleratorState._shared_state,
    accelerator.state.num_processes,
    [b[0].tolist() for b in aloader][:2],
]
"""


@pytest.mark.integration  # the new process imports torch and accelerate: seconds
def test_accelerate_state_is_shared_again_after_a_resume(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    from accelerate.state import AcceleratorState, GradientState

    try:
        ns = notebook(ACCELERATE)
        out = resume_elsewhere(pick(ns, "accelerator aloader"), ACCELERATE_NEXT, tmp_path)
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
    assert out == [True, True, True, 1, [[0.0, 1.0], [2.0, 3.0]]]
