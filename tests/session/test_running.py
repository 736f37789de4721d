"""The seam between a checkpoint and the loops: ``session`` records and arms loop positions
without importing ``loops``, which plugs in when it is imported and takes what was armed."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

RECORDS = [
    {
        "loop": "cell-1/epochs",
        "label": "epochs",
        "kind": "range",
        "done": 3,
        "length": 10,
        "finished": False,
        "description": "epoch 4 of 10",
    },
]

SCRIPT = r"""
import json, pickle, sys
from jupyter_pause.session import running
records = json.loads(sys.argv[1])
state = pickle.dumps({"cell-1/epochs": {"seed": 7}})
said = running.arm(records, state)
before = running.capture()
loaded_early = "jupyter_pause.loops" in sys.modules
import jupyter_pause.loops.positions as positions
armed = positions.waiting()
after = running.capture()
print(json.dumps({
    "said": said,
    "loaded_early": loaded_early,
    "before": [before.records, pickle.loads(before.state), before.notes],
    "armed": [[a.description, a.done, a.state] for a in armed],
    "after": [after.records, pickle.loads(after.state) if after.state else None],
}))
"""


def test_a_restore_before_loops_are_imported_is_kept_and_taken_by_the_loops() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(RECORDS)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    got = json.loads(out)
    assert got["said"] == ["loops were at epoch 4 of 10: run that cell again to continue there"]
    assert got["loaded_early"] is False, "session imported the loops layer"
    records, state, notes = got["before"]
    assert records == RECORDS and state == {"cell-1/epochs": {"seed": 7}}
    assert notes == ["loops held at epoch 4 of 10: run that cell again to continue there"]
    assert got["armed"] == [["epoch 4 of 10", 3, {"seed": 7}]]
    after_records, after_state = got["after"]
    assert [r["loop"] for r in after_records] == ["cell-1/epochs"]
    assert after_state == {"cell-1/epochs": {"seed": 7}}


def test_nothing_armed_and_no_loops_is_an_empty_record() -> None:
    script = (
        "import sys; from jupyter_pause.session import running; p = running.capture(); "
        "print(p.records == [] and p.state is None and p.notes == [] and 'jupyter_pause.loops' not in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "True"


def test_finished_loops_are_held_without_a_note() -> None:
    from jupyter_pause.session import running

    finished = [dict(RECORDS[0], finished=True)]
    assert running.armed_notes(finished) == []
    assert running.armed_notes(RECORDS + finished) == [
        "loops were at epoch 4 of 10: run that cell again to continue there"
    ]
    assert pickle.loads(pickle.dumps(running.Positions(RECORDS))).records == RECORDS
