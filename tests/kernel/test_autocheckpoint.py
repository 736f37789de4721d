"""Checkpoints nobody clicked for, with real kernels: on SIGTERM, and every N minutes between cells."""

from __future__ import annotations

import os
import signal
import time

import pytest

from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store

pytestmark = pytest.mark.integration


def _triggers(store, session):
    return [m.trigger for m in Catalog(Store(str(store))).checkpoints(session)]


def test_sigterm_checkpoints_then_exits(start_kernel, tmp_path):
    store = tmp_path / "store"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="term")
    a.run("%load_ext jupyter_pause\nimport torch\nweights = torch.arange(12.).reshape(3, 4)\nstep = 41").ok()
    process = a.manager.provisioner.process
    os.kill(a.pid, signal.SIGTERM)
    assert process.wait(timeout=60) == -signal.SIGTERM  # ended as SIGTERM asked, after saving
    a.close()
    assert _triggers(store, "term") == ["sigterm"]
    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="term")
    out = b.run("%load_ext jupyter_pause\n%resume").ok().stdout
    assert "verdict: restored" in out
    assert b.value("step") == 41 and b.value("float(weights.sum())") == 66.0


def test_sigterm_to_a_busy_kernel_still_saves(start_kernel, tmp_path):
    store = tmp_path / "store"
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="busy")
    a.run("%load_ext jupyter_pause\nprogress = []").ok()
    a.send("import time\nfor i in range(600):\n    progress.append(i)\n    time.sleep(0.05)")
    time.sleep(1.0)
    process = a.manager.provisioner.process
    os.kill(a.pid, signal.SIGTERM)
    assert process.wait(timeout=60) == -signal.SIGTERM
    a.close()
    (latest,) = Catalog(Store(str(store))).checkpoints("busy")
    assert latest.trigger == "sigterm"


def test_every_minutes_checkpoints_between_cells(start_kernel, tmp_path):
    store = tmp_path / "store"
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="every")
    out = a.run("%load_ext jupyter_pause\nx = 0\n%checkpoint --every 0.01").ok().stdout
    assert "checkpointing every 0.01 min between cells" in out
    for i in range(3):
        time.sleep(0.7)
        a.run(f"x = {i + 1}").ok()
    triggers = _triggers(store, "every")
    assert triggers.count("manual") == 1 and triggers.count("periodic") >= 2
    assert "periodic checkpoints stopped" in a.run("%checkpoint --every off").ok().stdout
    before = len(_triggers(store, "every"))
    time.sleep(0.7)
    a.run("x = 9").ok()
    assert len(_triggers(store, "every")) == before
    bad = a.run("%checkpoint --every soon")
    assert bad.ename == "UsageError" and "--every takes minutes" in bad.error
