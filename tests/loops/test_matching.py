"""Loops found by their structure (``loops.identity``, ``loops.matching``): a cell edited outside
its ``steps`` calls continues where the checkpoint left it, and says so; a change to a ``steps``
call itself starts the cell's unnamed loops over, saying which loop changed and how; a named
loop keeps its place. Each interrupted run is continued as a new kernel would after a resume
(positions and RNG state taken at a safe point, then armed in a fresh namespace)."""

from __future__ import annotations

import random

import pytest

from jupyter_pause.loops import positions
from jupyter_pause.loops import steps as loops
from jupyter_pause.process import rng
from tests.support.cells import Stop, run_cell

CELL = """
import random
import jupyter_pause as jp
for epoch in jp.steps(range(3)):
    for x in jp.steps(data):
        out.append((epoch, x, random.random()))
"""


def namespace() -> dict:
    return {"data": ["a", "b", "c", "d"], "out": []}


def continued_after_edit(source: str, edited: str, stop_after: int, first_run: str = "") -> tuple[list, list]:
    """Run ``source`` and stop at safe point ``stop_after``; continue with ``edited`` in a new
    namespace, with the positions and RNG state of that safe point. Returns (what ``edited``
    gives run whole, what the stopped run gave and then its continuation). ``first_run``: a cell
    run after the resume, before ``edited``."""
    random.seed(7)
    whole = namespace()
    run_cell(edited, whole)
    taken, count = {}, [0]

    def take(point):
        count[0] += 1
        if count[0] == stop_after:
            taken["positions"], taken["rng"] = positions.capture(), rng.capture()
            raise Stop

    loops.on_safe_point(take)
    random.seed(7)
    first = namespace()
    try:
        with pytest.raises(Stop):
            run_cell(source, first)
    finally:
        loops.remove(take)
    second = namespace()
    second["out"] = list(first["out"])
    rng.restore(taken["rng"])
    positions.arm(taken["positions"].records, taken["positions"].state)
    try:
        if first_run:
            run_cell(first_run, {**namespace(), "out": []}, kernel="2")
        run_cell(edited, second, kernel="2")
    finally:
        positions.arm([], None)
    return whole["out"], second["out"]


EDITS_OUTSIDE = {
    "a print added": CELL.replace("import random\n", "import random\nprint('starting')\n"),
    "a sleep in the body": CELL.replace("        out.append", "        import time; time.sleep(0)\n        out.append"),
    "a line after an epoch": CELL + "    lr = 0.01 * 0.5 ** epoch\n",
    "reformatted calls": CELL.replace("jp.steps(range(3))", "jp.steps( range( 3 ) )"),
}


@pytest.mark.parametrize("edit", EDITS_OUTSIDE)
def test_a_cell_edited_outside_its_loops_continues_where_it_was_and_says_so(edit, capsys):
    whole, continued = continued_after_edit(CELL, EDITS_OUTSIDE[edit], stop_after=7)
    assert continued == whole and len(whole) == 12  # bit-identical: none repeated, none skipped
    out = capsys.readouterr().out
    assert out.count("the cell changed outside its loops since the checkpoint: continuing at epoch 1, step 2") == 1


def test_another_cell_run_first_starts_over_and_the_edited_cell_still_continues(capsys):
    other = "import jupyter_pause as jp\nfor v in jp.steps(data[::-1]):\n    pass\n"
    edited = EDITS_OUTSIDE["a print added"]
    whole, continued = continued_after_edit(CELL, edited, stop_after=7, first_run=other)
    assert continued == whole
    captured = capsys.readouterr()
    assert (
        "loop 'v' starts from its first item" in captured.err and "has 1 now (loop 1 over `data[::-1]`)" in captured.err
    )
    assert "the cell changed outside its loops since the checkpoint: continuing at epoch 1, step 2" in captured.out


def test_the_same_cell_continues_without_saying_it_changed(capsys):
    whole, continued = continued_after_edit(CELL, CELL, stop_after=7)
    assert continued == whole
    assert "changed" not in capsys.readouterr().out


EDITS_OF_A_CALL = {
    "another iterable": (
        CELL.replace("jp.steps(data)", "jp.steps(data[:3])"),
        "loop 2 looped over `data` and now loops over `data[:3]`",
    ),
    "a loop more": (
        CELL + "for y in jp.steps([1]):\n    pass\n",
        "it had 2 steps loop(s) (loop 1 over `range(3)`, loop 2 over `data` inside loop 1) and has 3 now",
    ),
    "a loop less": (
        "import random\nimport jupyter_pause as jp\n"
        "for x in jp.steps(data):\n    out.append((0, x, random.random()))\n",
        "it had 2 steps loop(s)",
    ),
    "another nesting": (
        CELL.replace("    for x in jp.steps(data):\n        out", "    pass\nfor x in jp.steps(data):\n    out"),
        "the nesting of its loops changed: it was loop 1 over `range(3)`, loop 2 over `data` inside loop 1; "
        "it is loop 1 over `range(3)`, loop 2 over `data`",
    ),
    "another name": (
        CELL.replace("jp.steps(data)", "jp.steps(data, name='batches')"),
        "loop 2 had no name and is named 'batches' now",
    ),
}


@pytest.mark.parametrize("edit", EDITS_OF_A_CALL)
def test_a_changed_steps_call_starts_over_and_says_which_loop_changed(edit, capsys):
    edited, said = EDITS_OF_A_CALL[edit]
    random.seed(7)
    fresh = namespace()
    run_cell(edited, fresh)
    whole, continued = continued_after_edit(CELL, edited, stop_after=7)
    assert [item[:2] for item in continued[6:]] == [item[:2] for item in fresh["out"]]  # from its first item
    err = capsys.readouterr().err
    assert err.count("starts from its first item") == 1  # never silently, said once
    assert said in err
    assert "at epoch 1, step 2" in err and "name=" in err


def test_a_named_loop_keeps_its_place_when_its_iterable_changes(capsys):
    named = CELL.replace("jp.steps(range(3))", "jp.steps(range(3), name='epochs')").replace(
        "jp.steps(data)", "jp.steps(data, name='batches')"
    )
    longer = named.replace("range(3)", "range(4)")
    whole, continued = continued_after_edit(named, longer, stop_after=7)
    assert continued == whole and len(whole) == 16  # epochs 1 to 3 after the checkpoint's epoch 0
    err = capsys.readouterr().err
    assert "loop 'epochs' looped over `range(3)` when checkpointed and over `range(4)` now; its name matches" in err
    assert "starts from its first item" not in err


def test_an_unnamed_loop_inside_a_changed_named_one_starts_over_and_says_so(capsys):
    named = CELL.replace("jp.steps(range(3))", "jp.steps(range(3), name='epochs')")
    longer = named.replace("range(3)", "range(4)")
    _, continued = continued_after_edit(named, longer, stop_after=7)
    assert [item[:2] for item in continued[6:10]] == [(1, "a"), (1, "b"), (1, "c"), (1, "d")]  # epoch 1 again
    err = capsys.readouterr().err
    assert "its name matches" in err
    assert "loop 'x' starts from its first item" in err and "loop 1 looped over `range(3)`" in err
