"""The pool's sweep with keyed names (``store/poolsweep.py``): what a verified checkpoint, or a
checkpoint being written, references stays under every name its digest has here; what none
references goes; where a checkpoint's names cannot be computed here, every blob stays."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.integrity import check
from jupyter_pause.store.layout import manifest_key, pending_key, pool_key
from jupyter_pause.store.poolsweep import sweep_pool
from jupyter_pause.store.storage import Store

pytestmark = pytest.mark.usefixtures("new_process", "no_pause_env")

KEY = "cd" * 32


def _weights(folder: Path, seed: int) -> dict[str, torch.Tensor]:
    """Tensors loaded (mapped) from a model file of their own, as a notebook loads them."""
    folder.mkdir()
    generator = torch.Generator().manual_seed(seed)
    save_file({"w": torch.randn(128, 128, generator=generator)}, str(folder / "model.safetensors"))
    return load_file(str(folder / "model.safetensors"))


def test_a_keyed_checkpoints_model_file_and_index_stay_and_one_nothing_references_goes(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PAUSE_SIGNING_KEY", KEY)
    url = str(tmp_path / "store")
    kept = jp.checkpoint(store=url, session="a", namespace={"w": _weights(tmp_path / "one", 1)}).manifest
    gone = jp.checkpoint(store=url, session="b", namespace={"w": _weights(tmp_path / "two", 2)}).manifest
    store = PauseConfig().open_store(url)
    store.delete([manifest_key("b", gone.id)])

    report = sweep_pool(Catalog(store), grace=0)
    (keep,) = kept.model_files
    (drop,) = set(gone.model_files) - {keep}  # the first file is still mapped: it may be offered too
    names = store.names
    held = store.sizes(
        [
            names.pool_key(keep),
            names.file_index_key(keep, kept.hash),
            names.pool_key(drop),
            names.file_index_key(drop, gone.hash),
        ]
    )
    assert [size is not None for size in held.values()] == [True, True, False, False]
    assert report.kept_all is None and report.blobs_removed >= 1
    assert check(store, kept) == {}


def test_without_the_key_that_named_a_checkpoints_blobs_every_blob_stays(tmp_path, monkeypatch):
    """Read without a key (encryption off, so the manifest reads), a keyed checkpoint's pool names
    cannot be computed: the sweep removes nothing and says why."""
    monkeypatch.setenv("JUPYTER_PAUSE_SIGNING_KEY", KEY)
    monkeypatch.setenv("JUPYTER_PAUSE_ENCRYPT", "0")
    url = str(tmp_path / "store")
    manifest = jp.checkpoint(store=url, session="s", namespace={"t": torch.ones(10_000)}).manifest
    keyless = Store(url)
    keyless.write(pool_key("ab" * 16), b"no checkpoint names it")
    before = set(keyless.list("blobs/"))
    report = sweep_pool(Catalog(keyless), grace=0)
    assert report.blobs_removed == 0 and "cannot be named here" in (report.kept_all or "")
    assert set(keyless.list("blobs/")) == before
    assert check(PauseConfig().open_store(url), manifest) == {}


def test_a_blob_a_checkpoint_being_written_names_stays_under_its_keyed_name(tmp_path):
    store = Store(str(tmp_path / "store"), keys=KEY)
    digest = "ef" * 32
    key = store.names.pool_key(digest)
    store.write(key, b"reused by the checkpoint being written")
    os.utime(store.path(key), (time.time() - 7200, time.time() - 7200))
    Catalog(store).write_pending("s", "20990101-000000-abcdef", time.time(), [digest])
    assert sweep_pool(Catalog(store)).blobs_removed == 0 and store.exists(key)
    store.delete([pending_key("s", "20990101-000000-abcdef")])
    assert sweep_pool(Catalog(store)).blobs_removed == 1 and not store.exists(key)
