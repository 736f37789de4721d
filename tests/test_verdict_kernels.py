"""The four verdicts, each produced for real with kernels: restored, partial, fresh, live."""

from __future__ import annotations

import json

import pytest

from jupyter_pause.store.layout import blob_key

pytestmark = pytest.mark.integration

STATE = r"""
%load_ext jupyter_pause
import torch
torch.manual_seed(11)
model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model(torch.randn(4, 5)).sum().backward(); opt.step()
table = {"run": list(range(500)), "score": [i * 0.5 for i in range(500)]}
label = "experiment 3"
"""


def _manifest(store):
    (path,) = store.glob("sessions/v/checkpoints/*.json")
    return json.loads(path.read_text())["manifest"]


def test_live_then_restored_after_sigkill(start_kernel, tmp_path):
    store = tmp_path / "store"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="v")
    a.run(STATE + "%checkpoint").ok()
    live = a.run("%resume --check").ok().stdout
    assert live.startswith("verdict: live") and "nothing was released" in live
    a.kill()

    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="v")
    out = b.run("%load_ext jupyter_pause\n%resume").ok().stdout
    assert "verdict: restored" in out and "model check model: reproduces: output bit-identical" in out
    assert "4 of 4 variable(s) match" in out
    # A change made after the resume is the user's work, not a restore problem.
    b.run("table['run'].append(-1)").ok()
    again = b.run("%resume --check").ok().stdout
    assert again.startswith("verdict: restored") and "table: changed since the resume" in again
    reports = list(store.glob("sessions/v/reports/*.json"))
    assert len(reports) == 1
    report = json.loads(reports[0].read_text())
    assert report["verdict"] == "restored" and report["durations"]["resume_to_next_cell"] > 0


def test_partial_when_a_variable_blob_is_gone(start_kernel, tmp_path):
    store = tmp_path / "store"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="v")
    a.run(STATE + "%checkpoint").ok()
    a.kill()
    manifest = _manifest(store)
    table = next(v for v in manifest["variables"] if v["name"] == "table")
    (store / blob_key("v", table["blob"]["key"])).unlink()

    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="v")
    out = b.run("%load_ext jupyter_pause\n%resume --allow-partial").ok().stdout
    assert "verdict: partial" in out and "verdict: restored" not in out
    assert "table: missing (its data blob is missing or damaged)" in out
    assert "not back: table" in out
    assert b.value("label") == "experiment 3"  # the rest did come back


def test_fresh_when_cells_were_merely_rerun(start_kernel, tmp_path):
    store = tmp_path / "store"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="v")
    a.run(STATE + "%checkpoint").ok()
    a.close()
    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="v")
    b.run(STATE).ok()  # the same cells, the same seed, the same values: still not a resume
    out = b.run("%resume --check").ok().stdout
    assert out.startswith("verdict: fresh")
    assert "holds none of the checkpoint's state" in out and "run %resume" in out


def test_check_without_any_checkpoint_is_a_clear_message(start_kernel, tmp_path):
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(tmp_path / "empty"), JUPYTER_PAUSE_SESSION="v")
    result = a.run("%load_ext jupyter_pause\n%resume --check")
    assert result.ename == "UsageError"
    assert "no checkpoint of session 'v'" in result.error and "run %checkpoint first" in result.error
    assert "Traceback" not in result.stdout
