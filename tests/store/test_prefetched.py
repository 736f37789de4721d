"""Prefetched copies: a kernel reads a pool blob from this node when the server put it there, and
verifies it as from the store."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.store import mapping
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


def _one_blob(tmp_path):
    """A store that is not a local folder, a checkpoint's manifest in it, one of its pool blobs
    (its key) and the bytes the store holds there."""
    store, manifest = _taken(f"memory://prefetch-{tmp_path.name}", str(tmp_path / "prefetch"))
    named = manifest.blob_keys(manifest.blobs, store.names)  # store key -> digest
    key = max(named, key=lambda k: manifest.blobs[named[k]])
    return store, manifest, key, store.fs.cat_file(store.path(key))


def test_an_object_is_claimed_by_one_reader_and_taken_over_from_one_that_died(tmp_path):
    store, _, key, _ = _one_blob(tmp_path)
    near = store.prefetched
    assert near.claim(key) and not near.claim(key)  # held by a living process (this one)
    near.release(key)
    assert near.claim(key)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    near._claim(key).write_text(gone.stdout.strip())  # a claimant that exited without releasing
    assert near.claim(key)
    assert near.claim("sessions/s/manifest.json")  # only pool objects are claimed


def _while_waiting(near, then) -> threading.Event:
    """Run ``then()`` in a thread once a reader waits for a copy in ``near`` (``arriving``); the
    event is set once it has run."""
    waiting, ran = threading.Event(), threading.Event()
    original = near.arriving

    def arriving(key, *args):
        waiting.set()
        return original(key, *args)

    near.arriving = arriving
    threading.Thread(target=lambda: (waiting.wait(30), then(), ran.set()), daemon=True).start()
    return ran


def test_a_reader_waits_for_the_copy_under_way_instead_of_reading_the_store(tmp_path):
    store, manifest, key, stored = _one_blob(tmp_path)
    assert store.prefetched.claim(key)  # the server is copying it
    store.delete([key])  # the store can no longer give it: only the copy can
    near = store.prefetched
    landed = _while_waiting(near, lambda: (near.put(key, stored), near.release(key)))
    assert bytes(store.read(key, mapped=True)) == stored
    assert landed.wait(30)
    good, bad = fetch(store, manifest, list(manifest.blobs))
    assert not bad and set(good) == set(manifest.blobs)


def test_a_copy_that_never_comes_is_read_from_the_store(tmp_path):
    store, _, key, stored = _one_blob(tmp_path)
    assert store.prefetched.claim(key)
    failed = _while_waiting(store.prefetched, lambda: store.prefetched.release(key))  # the server's read failed
    assert bytes(store.read(key, mapped=True)) == stored
    assert failed.wait(30)
    assert store.prefetched.find(key) is None and store.prefetched.claim(key)  # the reader let it go


def test_a_reader_claims_what_it_reads_from_the_store_while_it_reads_it(tmp_path, monkeypatch):
    store, _, key, stored = _one_blob(tmp_path)
    seen = []
    original = store.backend.read

    def read(path, *args):
        seen.append(store.prefetched.claim(key))  # what a server's prefetch finds meanwhile
        return original(path, *args)

    monkeypatch.setattr(store.backend, "read", read)
    assert bytes(store.read(key, mapped=True)) == stored
    assert seen == [False] and store.prefetched.claim(key)


@pytest.mark.parametrize("place", ["memory", "disk"])
def test_a_copy_in_shared_memory_is_read_into_memory_of_its_own_and_one_on_disk_mapped(tmp_path, place):
    """A mapping of a copy in shared memory would hold the copy for as long as the arrays built on
    it live (and each page written to twice over); the page cache under a copy on disk is let go."""
    config = PauseConfig(
        store=f"memory://prefetch-{tmp_path.name}",
        prefetch_dir=str(tmp_path / "prefetch"),
        prefetch_memory_dir=str(tmp_path / "shm"),
    )
    big = np.random.default_rng(0).random(1 << 19)  # 4 MiB that do not compress: large enough to be mapped
    manifest = jp.checkpoint(session="s", namespace={"big": big}, config=config).manifest
    another_process()
    store = config.open_store()
    named = manifest.blob_keys(manifest.blobs, store.names)  # store key -> digest
    key = max(named, key=lambda k: manifest.blobs[named[k]])  # the array's
    store.prefetched.put(key, store.fs.cat_file(store.path(key)), in_memory=place == "memory")
    copy = store.prefetched.find(key)
    assert copy is not None and copy.startswith(str(tmp_path / ("shm" if place == "memory" else "prefetch")))
    assert store.prefetched.mappable(copy) is (place == "disk")
    store.delete([key])  # only the copy can give it
    data = store.read(key, mapped=True)
    assert bytes(data[:64]) == bytes(store.prefetched.path(key, place == "memory").read_bytes()[:64])
    assert (copy in {m.path for m in mapping.file_mappings()}) is (place == "disk")
    del data
    ns: dict = {}
    jp.resume(session="s", config=config, namespace=ns)
    assert np.array_equal(ns["big"], big)
