"""The core promise, with real kernels: checkpoint in kernel A, SIGKILL it, resume in kernel B."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from jupyter_pause.store.layout import pool_key

pytestmark = pytest.mark.integration

BUILD_STATE = r'''
%load_ext jupyter_pause
import random, math
import numpy as np
import torch
from torch import nn

random.seed(1); np.random.seed(2); torch.manual_seed(3)

class Net(nn.Module):
    """Defined in the notebook: must come back by value."""
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))
    def forward(self, x):
        return self.body(x)

def make_batch(n=8):
    x = torch.randn(n, 6)
    return x, (x.sum(dim=1, keepdim=True) * scale).tanh()

scale = 0.5
square = lambda v: v * v
model = Net()
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
scaler = torch.amp.GradScaler("cpu")

def train_step():
    x, y = make_batch()
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step(); sched.step()
    return loss.item()

history = [train_step() for _ in range(5)]
table = {"epoch": list(range(5)), "loss": history}
features = np.random.rand(200, 100)
'''

CONTINUE = r"""
import json as _json
_out = {
    "losses": [train_step() for _ in range(3)],
    "draws": [random.random(), float(np.random.rand()), float(torch.rand(1))],
    "lr": sched.get_last_lr(),
    "aliased": opt.param_groups[0]["params"][0] is next(model.parameters()),
    "sched_opt": sched.optimizer is opt,
    "square": square(7),
    "net": type(model).__name__,
    "features": float(features.sum()),
    "table": table["loss"],
}
print(_json.dumps(_out))
"""


def _last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def test_resume_after_sigkill_continues_bit_identically(start_kernel, tmp_path):
    store = tmp_path / "store"
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store))
    a.run(BUILD_STATE).ok()
    out = a.run("%checkpoint --session roundtrip").ok().stdout
    assert "checkpoint " in out and "saved" in out
    expected = _last_json(a.run(CONTINUE).ok().stdout)
    pid_a = a.pid
    a.kill()

    (tmp_path / "b").mkdir()
    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store))
    assert b.pid != pid_a
    resumed = b.run("%load_ext jupyter_pause\n%resume --session roundtrip").ok().stdout
    assert "restored" in resumed and "RNG state restored" in resumed
    got = _last_json(b.run(CONTINUE).ok().stdout)

    assert got["losses"] == expected["losses"]  # bit-identical floats
    assert got["draws"] == expected["draws"]
    assert got["lr"] == expected["lr"]
    assert got["aliased"] is True and got["sched_opt"] is True
    assert got["square"] == 49 and got["net"] == "Net"
    assert got["features"] == expected["features"] and got["table"] == expected["table"]
    # The notebook-defined function sees the live namespace, as if its cell had just run.
    b.run("scale = 0.0").ok()
    assert b.value("float(make_batch()[1].abs().sum())") == 0.0


def test_kill_during_checkpoint_leaves_earlier_checkpoint(start_kernel, tmp_path):
    """SIGKILL at several moments inside %checkpoint: the half-written one is never seen."""
    store = tmp_path / "store"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    setup = (
        "%load_ext jupyter_pause\nimport torch\nmarker = 'first'\n"
        "small = torch.arange(10.)\n%checkpoint marker small --session killed\n"
        "marker = 'second'\nbig = [torch.randn(2_000_000) for _ in range(40)]\n"
    )
    for delay in (0.05, 0.3, 0.8):
        a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store))
        a.run(setup).ok()
        a.send("%checkpoint marker big --session killed")
        time.sleep(delay)
        a.kill()
        listing = subprocess.run(
            [sys.executable, "-m", "jupyter_pause.cli", "list", "--store", str(store), "--json", "--session", "killed"],
            capture_output=True,
            text=True,
            check=True,
        )
        committed = [r for r in json.loads(listing.stdout) if "incomplete" not in r]
        b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store))
        b.run("%load_ext jupyter_pause\n%resume --session killed").ok()
        marker = b.value("marker")
        newest_vars = committed[0]["variables"]
        # Either the kill came after the commit (second, with 'big') or before (first): never a mix.
        if marker == "second":
            assert b.value("len(big)") == 40 and newest_vars == 2
        else:
            assert marker == "first" and b.value("'big' in dir()") is False
        b.close()


def test_unsavable_and_secret_variables_reported_never_stored(start_kernel, tmp_path):
    store = tmp_path / "store"
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), VERY_PRIVATE_ENV="env-value-77f1")
    out = (
        a.run(
            "%load_ext jupyter_pause\nimport os, threading\n"
            "api_token = 'tok-9d2c-secret'\ndb_password = 'pw-51aa-secret'\n"
            "handle = os.fdopen(os.pipe()[0])\nenv = os.environ\ngen = (i for i in range(3))\nkept = 41\n"
            "%checkpoint --session secrets"
        )
        .ok()
        .stdout
    )
    # The pipe cannot be saved; the statement that opened it is replayed on resume instead.
    assert "handle (_io.TextIOWrapper): rebuilt on resume from 1 statement(s)" in out
    assert "gen (generator)" in out and "env (os._Environ)" in out
    assert "api_token (str): looks like a secret" in out
    for path in store.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in (b"tok-9d2c-secret", b"pw-51aa-secret", b"env-value-77f1"):
                assert secret not in data, f"{secret!r} leaked into {path}"
    err = a.run("%checkpoint --session secrets --strict")
    assert err.ename == "UsageError" and "nothing saved" in err.error and "handle" in err.error
    a.run("%checkpoint api_token --session secrets").ok()
    assert any(b"tok-9d2c-secret" in p.read_bytes() for p in store.rglob("*") if p.is_file())
    assert a.value("kept") == 41  # the kernel lives on


def test_bad_input_gives_usage_errors_and_kernel_keeps_running(start_kernel, tmp_path):
    store = tmp_path / "store"
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store))
    a.run("%load_ext jupyter_pause\nx = 1").ok()
    cases = {
        "%resume --session nothing-yet": "no checkpoint of session 'nothing-yet'",
        "%checkpoint nosuchvar": "no variable named nosuchvar",
        "%checkpoint --store nosuch://bucket/x": "cannot open store nosuch://bucket/x",
        "%checkpoint --session ../escape": "invalid session name",
        "%resume --map-location gpu7": "invalid choice",
    }
    for line, message in cases.items():
        result = a.run(line)
        assert result.ename == "UsageError", line
        assert message in result.error, (line, result.error)
    a.run("%checkpoint x --session s").ok()
    bad_id = a.run("%resume 19990101-000000-abcdef --session s")
    assert bad_id.ename == "UsageError" and "no checkpoint '19990101-000000-abcdef'" in bad_id.error
    unwritable = a.run("%checkpoint x --store /proc/no-store-here --session s")
    assert unwritable.ename == "UsageError" and "cannot reach" in unwritable.error
    assert "/proc/no-store-here" in unwritable.error
    assert a.value("x") == 1


def test_notebook_document_and_session_name_from_jupyter_server(start_kernel, tmp_path):
    store = tmp_path / "store"
    work = tmp_path / "work" / "exp"
    work.mkdir(parents=True)
    nb = work / "Train Model.ipynb"
    nb.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    a = start_kernel(work, JUPYTER_PAUSE_STORE=str(store), JPY_SESSION_NAME=str(nb))
    out = a.run("%load_ext jupyter_pause\ny = 2\n%checkpoint").ok().stdout
    assert "session 'Train-Model'" in out and "notebook Train Model.ipynb saved" in out
    manifests = list(store.glob("sessions/Train-Model/checkpoints/*.json"))
    assert len(manifests) == 1
    body = json.loads(manifests[0].read_text())["manifest"]
    stored = store / pool_key(body["notebook"]["blob"])
    assert stored.read_bytes() == nb.read_bytes()
