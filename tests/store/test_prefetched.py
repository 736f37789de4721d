"""Prefetched copies: a kernel reads a pool blob from this node when the server put it there, and
verifies it as from the store."""

from __future__ import annotations

import pytest

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.integrity import fetch
from jupyter_pause.store.prefetched import for_store
from jupyter_pause.store.storage import Store
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process", "no_pause_env")


def _taken(url: str, folder: str, key: str | None = None):
    config = PauseConfig(store=url, signing_key=key or "", prefetch_dir=folder)
    manifest = jp.checkpoint(session="s", namespace={"w": bytes(range(256)) * 4096}, config=config).manifest
    another_process()
    return config.open_store(), manifest


@pytest.mark.parametrize("key", [None, "alice's key"], ids=["plain", "encrypted"])
def test_a_blob_copied_onto_this_node_is_read_there_and_nothing_else_is(tmp_path, key):
    url = f"memory://prefetch-{tmp_path.name}"  # a store that is not a local folder
    store, manifest = _taken(url, str(tmp_path / "prefetch"), key)
    assert store.prefetched is not None and store.prefetched.root.parent == tmp_path / "prefetch"
    paths = manifest.blob_keys(manifest.blobs, store.names)
    for path in paths:
        store.prefetched.put(path, store.fs.cat_file(store.path(path)))  # as a prefetch copies them: stored bytes
    store.delete(list(paths))  # gone from the store: only the copies can give them
    good, bad = fetch(store, manifest, list(manifest.blobs))
    assert not bad and set(good) == set(manifest.blobs)
    assert Catalog(store).checkpoints("s", store.keys)[0].id == manifest.id  # the manifest itself: from the store


def test_a_copy_that_does_not_verify_is_dropped_and_the_store_read_instead(tmp_path):
    url = f"memory://prefetch-{tmp_path.name}"
    store, manifest = _taken(url, str(tmp_path / "prefetch"))
    paths = manifest.blob_keys(manifest.blobs, store.names)
    for path in paths:
        store.prefetched.put(path, b"\0" * len(store.fs.cat_file(store.path(path))))  # same size, other bytes
    good, bad = fetch(store, manifest, list(manifest.blobs))
    assert not bad and set(good) == set(manifest.blobs)
    assert all(store.prefetched.find(path) is None for path in paths)


def test_a_local_store_has_no_prefetch_folder(tmp_path):
    store = PauseConfig(store=str(tmp_path / "store"), prefetch_dir=str(tmp_path / "p")).open_store()
    assert store.prefetched is None
    assert Store(f"memory://x-{tmp_path.name}").prefetched is None
    assert for_store(str(tmp_path), "s3://a/b").root != for_store(str(tmp_path), "s3://a/c").root
