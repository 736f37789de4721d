"""SIGKILL of a process while the model file a checkpoint references is on its way into the pool.

The checkpoint waits for that upload before it commits, so a kill then leaves no checkpoint and
no model file under its sha256 (a local store writes it under a temporary name first): the
previous checkpoint is still the newest and resumes exactly, ``jupyter pause verify`` finds
nothing damaged, the next process uploads the file and commits, and cleanup removes the part
written.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.layout import file_index_key, pool_key
from jupyter_pause.store.retention import collect
from jupyter_pause.store.storage import Store
from tests.support.processes import another_process
from tests.support.verifying import check_verify_rows, cli_verify

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("new_process", "no_pause_env")]

SESSION = "uploading"

#: A process that loads the model, then checkpoints it; its upload stops after the first part
#: (``argv[3]`` is created then) until the process is killed, or goes on with ``argv[4]`` "go".
_TAKE = """
import sys, time, torch
import jupyter_pause as jp
from safetensors.torch import load_file
from jupyter_pause.store.backends.local import LocalBackend

url, folder, started, mode = sys.argv[1:5]
real = LocalBackend.write_stream

def stalled(self, path, chunks, keep):
    def parts():
        for i, chunk in enumerate(chunks):
            yield chunk
            if i == 0 and mode == "stall":
                open(started, "w").close()
                time.sleep(600)
    return real(self, path, parts(), keep)

LocalBackend.write_stream = stalled

class Loaded(torch.nn.Module):
    def __init__(self):
        super().__init__()
        for name, t in load_file(folder + "/model.safetensors").items():
            self.register_buffer(name, t)
        self.name_or_path = folder

jp.checkpoint(store=url, session="uploading", namespace={"model": Loaded(), "marker": mode})
print("committed")
"""


def _model(tmp_path: Path) -> str:
    """A model file of 32 MiB: several parts of an upload."""
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(11)
    folder = tmp_path / "model"
    folder.mkdir()
    save_file({f"w{i}": torch.randn(1 << 20, generator=gen) for i in range(8)}, str(folder / "model.safetensors"))
    return str(folder)


def _run(url: str, folder: str, started: Path, mode: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    argv = [sys.executable, "-c", _TAKE, url, folder, str(started), mode]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_kill_during_the_model_file_upload_loses_nothing(tmp_path, tally):
    url, folder = str(tmp_path / "store"), _model(tmp_path)
    first = jp.checkpoint(store=url, session=SESSION, namespace={"marker": "first"}).manifest
    started = tmp_path / "started"
    taking = _run(url, folder, started, "stall")
    deadline = time.monotonic() + 120
    while not started.exists():
        assert taking.poll() is None, taking.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the upload never started"
        time.sleep(0.05)
    taking.send_signal(signal.SIGKILL)
    taking.wait(30)
    tally.fault("SIGKILL during a model file upload")

    store = Store(url)
    listing = Catalog(store).listing(SESSION)
    assert [m.id for m in listing.checkpoints] == [first.id]  # nothing committed, nothing lost
    code, rows = cli_verify(url, SESSION)
    committed, _ = check_verify_rows(rows, {first.id: first.stats["bytes_total"]})
    assert code == 0 and [r["ok"] for r in committed] == [True], rows
    sha = hashlib.sha256(Path(folder, "model.safetensors").read_bytes()).hexdigest()
    assert not any(k.startswith("files/") for k in store.list(""))  # no index: the file is not in the pool
    assert store.sizes([pool_key(sha)])[pool_key(sha)] is None  # nor under its name, part-written
    assert [k for k in store.list("blobs/") if Path(k).name.startswith(f".{sha}")]  # only as a part
    another_process()
    resumed: dict = {}
    jp.resume(store=url, session=SESSION, namespace=resumed)
    tally.resumed(resumed["marker"] == "first")
    assert resumed["marker"] == "first"

    again = _run(url, folder, started, "go")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0 and "committed" in out, err[-3000:]
    latest = max(Catalog(store).listing(SESSION).checkpoints, key=lambda m: m.created)
    (file,) = latest.model_files
    assert store.sizes([pool_key(file)])[pool_key(file)] == os.path.getsize(Path(folder, "model.safetensors"))
    assert store.exists(file_index_key(file, latest.hash))
    collect(Catalog(store), SESSION, grace=0.0)
    assert not [k for k in store.list("blobs/") if Path(k).name.startswith(f".{sha}")]  # the cut-off part: gone
    another_process()
    target: dict = {}
    cycle = jp.resume_and_verify(store=url, session=SESSION, namespace=target, write_report=False)
    assert cycle.verdict.kind == "restored", cycle.verdict.details
    tally.outcome("model upload killed: previous checkpoint kept, next one uploads again")
