"""Reading a checkpoint ahead of its restore (session/holding.py): what is held is what verified
against a manifest this process checked, the restore takes it instead of reading the store again,
and what it does not take is let go."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.session import holding
from jupyter_pause.store import memory
from jupyter_pause.store.catalog import Catalog
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")


def _paused(store: Path, config: PauseConfig | None = None):
    ns = {"w": torch.arange(200_000, dtype=torch.float32), "arr": np.ones(30_000), "step": 4}
    manifest = jp.checkpoint(store=str(store), session="s", namespace=ns, config=config).manifest
    another_process()
    return manifest


def _blob_files(store: Path, manifest) -> dict[str, Path]:
    return {key: store / manifest.blob_key(key) for key in manifest.needed()}


def _sizes(manifest) -> int:
    return sum(manifest.blobs[k] for k in manifest.needed())


def test_a_held_checkpoint_is_restored_without_reading_its_blobs_again(tmp_path):
    manifest = _paused(tmp_path)
    held = holding.hold("s", manifest.id, store=str(tmp_path))
    assert (held.checkpoint, held.blobs, held.bytes, held.bad) == (
        manifest.id,
        len(manifest.needed()),
        _sizes(manifest),
        {},
    )
    for path in _blob_files(tmp_path, manifest).values():
        path.unlink()  # the restore can only have them from what was held
    ns: dict = {}
    result = jp.resume(store=str(tmp_path), session="s", namespace=ns)
    assert result.manifest.id == manifest.id and not result.damaged and not result.skipped
    assert torch.equal(ns["w"], torch.arange(200_000, dtype=torch.float32)) and ns["step"] == 4
    assert np.array_equal(ns["arr"], np.ones(30_000))
    assert holding.take(manifest, manifest.needed()) == {}  # taken once; nothing is held after


def test_a_blob_damaged_when_read_ahead_is_not_held_and_the_restore_reads_it_again(tmp_path):
    manifest = _paused(tmp_path)
    key = manifest.arrays[next(v for v in manifest.variables if v.name == "w").arrays[0]].blob
    path = _blob_files(tmp_path, manifest)[key]
    good = path.read_bytes()
    path.write_bytes(good[:100] + bytes([good[100] ^ 1]) + good[101:])
    held = holding.hold("s", manifest.id, store=str(tmp_path))
    assert list(held.bad) == [key], held.bad
    assert held.blobs == len(manifest.needed()) - 1
    path.write_bytes(good)  # mended before the restore, which reads it from the store
    ns: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=ns)
    assert torch.equal(ns["w"], torch.arange(200_000, dtype=torch.float32))


def test_the_manifest_is_verified_with_this_process_s_key(tmp_path, monkeypatch):
    """A manifest handed over that does not verify here is set aside for the store's; one the
    store holds that this process's key did not sign is refused, and nothing is held."""
    signed = PauseConfig(signing_key="alice's key", encrypt=False)  # signed, readable: an edit can be made
    manifest = _paused(tmp_path, signed)
    edited = Catalog(signed.open_store(str(tmp_path), {})).manifest("s", manifest.id, signed.keyring).as_read()
    assert b'"step"' in edited
    edited = edited.replace(b'"step"', b'"stop"').decode()
    read: list[str] = []
    original = Catalog.manifest
    monkeypatch.setattr(Catalog, "manifest", lambda self, *a: read.append(a[1]) or original(self, *a))
    held = holding.hold("s", manifest.id, edited, store=str(tmp_path), config=signed)
    assert held.blobs == len(manifest.needed()) and read == [manifest.id]  # from the store's own manifest
    holding.forget()
    with pytest.raises(ValueError, match=f"checkpoint {manifest.id} of session 's' was not read ahead: .*signature"):
        mallory = PauseConfig(signing_key="mallory's key", encrypt=False)
        holding.hold("s", manifest.id, store=str(tmp_path), config=mallory)
    assert holding.take(manifest, manifest.needed()) == {}


def test_held_bytes_go_only_to_a_manifest_naming_the_same_content(tmp_path):
    manifest = _paused(tmp_path)
    holding.hold("s", manifest.id, store=str(tmp_path))
    key = manifest.needed()[-1]
    other = dataclasses.replace(manifest, blobs={**manifest.blobs, key: manifest.blobs[key] + 1})
    assert key not in holding.take(other, manifest.needed())
    holding.hold("s", manifest.id, store=str(tmp_path))
    assert holding.take(dataclasses.replace(manifest, hash="sha256"), manifest.needed()) == {}


def test_what_the_restore_does_not_take_is_let_go(tmp_path):
    """A newer checkpoint was restored instead: the blobs it shares with the held one are taken
    (they are the same bytes), the rest let go."""
    first = _paused(tmp_path)
    holding.hold("s", first.id, store=str(tmp_path))
    ns = {"w": torch.arange(200_000, dtype=torch.float32) + 1, "arr": np.ones(30_000), "step": 5}
    second = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    another_process()
    holding.hold("s", first.id, store=str(tmp_path))
    back: dict = {}
    assert jp.resume(store=str(tmp_path), session="s", namespace=back).manifest.id == second.id
    assert back["step"] == 5 and torch.equal(back["w"], ns["w"])
    assert holding._held == {}


def test_the_node_s_copies_of_what_is_held_are_removed(tmp_path):
    """A remote store's blobs copied onto the node for the resume are read from there, then
    removed: while the resume waits, the checkpoint is in the node's memory once."""
    config = PauseConfig(
        store=f"memory://hold-{tmp_path.name}",
        prefetch_dir=str(tmp_path / "prefetch"),
        prefetch_memory_dir=str(tmp_path / "shm"),
        prefetch_keep_free=0.0,
    )
    ns = {"w": torch.arange(200_000, dtype=torch.float32), "step": 4}
    manifest = jp.checkpoint(session="s", namespace=ns, config=config).manifest
    another_process()
    store = config.open_store()
    paths = list(manifest.blob_keys(manifest.blobs, store.names))
    for path in paths:  # as the server's prefetch leaves them
        store.prefetched.put(path, bytes(store.read(path)), in_memory=True)
    held = holding.hold("s", manifest.id, config=config)
    assert held.blobs == len(manifest.needed()) and held.bad == {}
    assert [p for p in paths if store.prefetched.find(p)] == []
    back: dict = {}
    jp.resume(session="s", namespace=back, config=config)
    assert torch.equal(back["w"], ns["w"]) and back["step"] == 4


def test_an_encrypted_store_s_blobs_are_held_as_plaintext_and_restored(tmp_path):
    """With a key the store's blobs are sealed and named by keyed digests: what is held is what
    the seal opened to, under the digest the manifest names."""
    keyed = PauseConfig(signing_key="alice's key")
    manifest = _paused(tmp_path, keyed)
    held = holding.hold("s", manifest.id, store=str(tmp_path), config=keyed)
    assert (held.blobs, held.bytes, held.bad) == (len(manifest.needed()), _sizes(manifest), {})
    for key in manifest.needed():
        path = tmp_path / manifest.blob_key(key, keyed.open_store(str(tmp_path), {}).names)
        path.unlink()
    ns: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=ns, config=keyed)
    assert torch.equal(ns["w"], torch.arange(200_000, dtype=torch.float32)) and ns["step"] == 4


def test_a_remote_checkpoint_too_large_for_the_memory_available_is_not_read_ahead(tmp_path, monkeypatch):
    """A wait for a GPU may last hours: a remote checkpoint is read ahead only where it takes at
    most half the memory available (the restore reads it once the wait is over)."""
    config = PauseConfig(store=f"memory://hold-{tmp_path.name}", prefetch_dir="")
    ns = {"w": torch.arange(200_000, dtype=torch.float32), "step": 4}
    manifest = jp.checkpoint(session="s", namespace=ns, config=config).manifest
    another_process()
    monkeypatch.setattr(memory, "available", lambda: 2 * _sizes(manifest) - 2)
    held = holding.hold("s", manifest.id, config=config)
    assert (held.blobs, held.bytes) == (0, 0)
    assert "would take more than 50% of the memory available" in held.skipped, held.skipped
    assert held.skipped.endswith("the restore reads it once the wait is over")
    assert holding.take(manifest, manifest.needed()) == {}
    monkeypatch.setattr(memory, "available", lambda: 2 * _sizes(manifest))
    assert holding.hold("s", manifest.id, config=config).blobs == len(manifest.needed())
