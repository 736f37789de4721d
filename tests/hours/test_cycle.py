"""The GPU-hours report over a ledger a real Jupyter server and its kernels wrote through a real
pause/resume cycle: its numbers are the records' own moments, and the CLI reads it."""

from __future__ import annotations

import json
import time

import pytest

from jupyter_pause import ledger
from jupyter_pause.cli import main
from jupyter_pause.hours import records, timeline, totals, whatif
from jupyter_pause.store.storage import Store
from tests.support.server_helpers import call, open_kernel, user_cell, wait_state, write_notebook

pytestmark = pytest.mark.integration


@pytest.fixture
def pause_server():
    return {"cuda_devices": 2}


async def test_a_real_cycle_adds_up(jp_fetch, jp_serverapp, jp_root_dir, store, capsys):
    path = write_notebook(jp_root_dir, "work/train.ipynb", "x = 1")
    kernel = await open_kernel(jp_fetch, path)
    await user_cell(jp_serverapp, kernel, "import time\nbig = bytes(2_000_000)\ntime.sleep(0.5)")
    await call(jp_fetch, "pause", path=path)
    assert (await wait_state(jp_fetch, path, ("paused", "failed")))["state"] == "paused"
    await call(jp_fetch, "resume", path=path)
    assert (await wait_state(jp_fetch, path, ("ready", "failed")))["state"] == "ready"
    await jp_serverapp.web_app.settings["jupyter_pause"].wait()
    until = time.time()

    events, malformed = ledger.read(Store(str(store)))
    at = {}
    for e in events:
        if e.session == "work--train":
            at.setdefault(e.event, []).append(e)
    parsed, bad = records.parse_all(events)
    lines = timeline.timelines(parsed)
    hours = totals.compute(lines, totals.Window(None, until), malformed=malformed + bad)
    (row,) = [s for s in hours.sessions if s.key == "work--train"]
    first, second = (e.at for e in at["kernel_started"])
    stop = at["kernel_stopped"][0].at
    assert hours.malformed == 0
    assert row.gpus == 2  # the server's count, though the kernels themselves see no GPU here
    assert row.held.low == pytest.approx(2 * ((stop - first) + (until - second)) / 3600)
    assert row.released.low == pytest.approx(2 * (second - stop) / 3600)
    (span,) = at["activity"][0].spans
    assert row.active.low == pytest.approx(2 * (span[1] - span[0]) / 3600)
    assert (row.pauses, row.resumes) == (1, 1)
    assert row.waits == [pytest.approx(at["next_cell_run"][0].at - at["resume_requested"][0].at)]
    assert row.snapshot_bytes == at["checkpoint_committed"][0].bytes_total >= 2_000_000
    _, outcomes = whatif.what_if(lines, hours, {"1s": 1.0})
    assert outcomes[0].pauses == 1

    assert main(["hours", "--store", str(store), "--json", "--what-if", "1s,1h"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total"]["pauses"] == 1 and data["malformed_records"] == 0
    assert [p["policy"] for p in data["what_if"]["policies"]] == ["current", "idle 1s", "idle 1h"]
