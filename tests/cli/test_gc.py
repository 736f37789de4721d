"""``jupyter pause gc`` (jupyter_pause/cli/gc.py) on a real S3 server, as a user of a shared bucket
runs it: a co-tenant's planted manifest never steers it, and ``--dry-run`` says what would go and why."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import jupyter_pause as jp
from jupyter_pause.cli import main
from jupyter_pause.config import PauseConfig
from jupyter_pause.store.layout import manifest_key, pending_key
from jupyter_pause.store.storage import Store
from tests.support.plants import UNSIGNED, plant_manifest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("new_process", "no_pause_env")]

USER_KEY = "5e" * 32


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def _weights(tmp_path: Path) -> dict[str, torch.Tensor]:
    """A model's tensors, mapped from their model file: a checkpoint references the file."""
    generator = torch.Generator().manual_seed(7)
    save_file({"w": torch.randn(256, 256, generator=generator)}, str(tmp_path / "model.safetensors"))
    return load_file(str(tmp_path / "model.safetensors"))


def test_gc_keep_1_after_a_planted_newer_unsigned_manifest_keeps_all_the_users_data(
    s3_env, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("JUPYTER_PAUSE_SIGNING_KEY", USER_KEY)
    namespace = {"weights": _weights(tmp_path), "step": 1}
    old = jp.checkpoint(store=s3_env, session="train", namespace=namespace).manifest
    namespace["step"] = 2
    newest = jp.checkpoint(store=s3_env, session="train", namespace=namespace).manifest
    assert newest.model_files and newest.lineage == old.lineage
    store = PauseConfig().open_store(s3_env)
    users = set(store.list(""))
    planted = plant_manifest(s3_env, newest, UNSIGNED)  # naming none of the user's data

    code, out = _run(capsys, "gc", "--keep", "1", "--grace", "0", "--dry-run", "--store", s3_env)
    assert code == 0
    assert f"not counted: checkpoint {planted}: signature: not signed" in out
    assert f"would remove checkpoint {manifest_key('train', old.id)} (" in out
    assert f": beyond the newest 1 of lineage {old.lineage}" in out
    assert "store pool: would remove 0 blob(s)" in out and "kept every blob: session 'train' holds manifests" in out
    assert set(store.list("")) >= users

    code, out = _run(capsys, "gc", "--keep", "1", "--grace", "0", "--json", "--store", s3_env)
    result = json.loads(out)
    (session,) = result["sessions"]
    assert code == 0 and session["kept"] == [newest.id] and session["removed"] == [old.id]
    assert list(session["not_counted"]) == [planted] and result["counts"]["blob"] == 0
    assert set(store.list("")) >= users - {manifest_key("train", old.id)}  # every object of the newest
    code, out = _run(capsys, "verify", "--session", "train", newest.id, "--store", s3_env)
    assert code == 0 and out.startswith(f"ok      train {newest.id}")
    resumed: dict = {}
    jp.resume(store=s3_env, session="train", namespace=resumed)
    assert resumed["step"] == 2 and torch.equal(resumed["weights"]["w"], namespace["weights"]["w"])


def test_one_gc_lists_each_folder_once_and_reads_each_manifest_once(tmp_path, capsys, monkeypatch):
    """Over several sessions: each session's manifests are listed and read once, for its own
    collection and for the pool's sweep alike; the notes of a checkpoint being written are read
    before the manifests and once more just before anything is deleted."""
    url = str(tmp_path)
    for session in ("a", "b", "c", "d"):
        for step in range(3):
            jp.checkpoint(store=url, session=session, namespace={"x": torch.full((1000,), float(step))})
    store = PauseConfig().open_store(url)
    for key in store.list("blobs/"):  # past the grace period, so the sweep deletes
        os.utime(store.path(key), (time.time() - 7200, time.time() - 7200))
    writing = pending_key("d", "20990101-000000-abcdef")
    store.write(writing, json.dumps({"id": "20990101-000000-abcdef", "created": 0.0, "blobs": []}).encode())
    manifests = [key for key in store.list("sessions/") if "/checkpoints/" in key]
    listed: list[str] = []
    read: list[str] = []
    real_list, real_read = Store.list, Store.read
    monkeypatch.setattr(Store, "list", lambda self, prefix: listed.append(prefix) or real_list(self, prefix))
    monkeypatch.setattr(Store, "read", lambda self, key, *a, **k: read.append(key) or real_read(self, key, *a, **k))

    code, out = _run(capsys, "gc", "--keep", "2", "--grace", "10m", "--store", url)
    assert code == 0 and out.count("kept 2 checkpoint(s), removed 1 checkpoint(s)") == 4, out
    assert "store pool: removed 0 blob" not in out, out
    assert sorted(listed) == sorted(
        ["blobs/", "files/", "sessions/", "sessions/"] + [f"sessions/{s}/checkpoints/" for s in "abcd"]
    )  # the second listing of sessions/: the notes, again, before deleting
    assert sorted(key for key in read if "/checkpoints/" in key) == sorted(manifests)
    assert read.count(writing) == 2
