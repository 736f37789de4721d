"""jupyter_pause.store.survey: what one cleanup reads of a store, each listing and each manifest
once, in the order that keeps a checkpoint being written safe (the pool listed first, the notes
read before the manifests are listed, the notes read again just before anything is deleted)."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

import jupyter_pause as jp
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.layout import manifest_key, pending_key, pool_key, pool_prefix
from jupyter_pause.store.retention import collect, sweep_pool
from jupyter_pause.store.storage import Store
from jupyter_pause.store.survey import Survey

pytestmark = pytest.mark.usefixtures("new_process")

#: A checkpoint being written, its note naming blobs.
WRITING = "20990101-000000-abcdef"


def _note(store: Store, session: str, blobs: list[str]) -> None:
    note = {"id": WRITING, "created": time.time(), "blobs": sorted(blobs)}
    store.write(pending_key(session, WRITING), json.dumps(note).encode())


def _aged(store: Store, keys: list[str]) -> None:
    """Written two hours ago: past the grace period."""
    for key in keys:
        os.utime(store.path(key), (time.time() - 7200, time.time() - 7200))


def test_the_pool_is_listed_first_and_the_manifests_after_the_notes_are_read(tmp_path, monkeypatch):
    """A checkpoint that commits during the cleanup is seen in its note (read before the manifests
    are listed) or in its manifest (listed after): neither is missed by a cleanup of each session
    and the pool that reads the store once."""
    url = str(tmp_path)
    for session in ("a", "b"):
        jp.checkpoint(store=url, session=session, namespace={"x": np.arange(1000)})
    store = Store(url)
    _note(store, "b", [])
    done: list[str] = []
    real_list, real_many = Store.list, Store.read_many
    monkeypatch.setattr(Store, "list", lambda self, prefix: done.append(f"list {prefix}") or real_list(self, prefix))

    def read_many(self, keys, *args, **kwargs):
        keys = list(keys)
        done.extend(f"read {key}" for key in keys)
        return real_many(self, keys, *args, **kwargs)

    monkeypatch.setattr(Store, "read_many", read_many)
    survey = Survey.take(Catalog(store), grace=60)
    for session in survey.sessions:
        collect(Catalog(store), session, pool=False, survey=survey)
    sweep_pool(Catalog(store), survey=survey)

    first = {what: done.index(what) for what in done}
    notes_read = first[f"read {pending_key('b', WRITING)}"]
    assert first[f"list {pool_prefix()}"] < first["list sessions/"] < notes_read
    assert all(notes_read < first[f"list sessions/{s}/checkpoints/"] for s in ("a", "b"))
    assert [what for what in done if what.startswith("read sessions/a/checkpoints/")] == [
        f"read {key}" for key in real_list(store, "sessions/a/checkpoints/")
    ]  # each manifest once, for the session and the pool alike


def test_a_checkpoint_begun_after_the_survey_keeps_the_blobs_it_names(tmp_path):
    """Its note is read again just before the pool's sweep deletes anything."""
    url = str(tmp_path)
    gone = jp.checkpoint(store=url, session="a", namespace={"x": np.arange(100_000)}).manifest
    store = Store(url)
    store.delete([manifest_key("a", gone.id)])
    _aged(store, [pool_key(digest) for digest in gone.blobs])
    survey = Survey.take(Catalog(store))
    _note(store, "b", list(gone.blobs))  # session b begins a checkpoint that reuses them
    assert sweep_pool(Catalog(store), survey=survey).blobs_removed == 0
    assert all(store.exists(pool_key(digest)) for digest in gone.blobs)


def test_a_survey_without_the_pool_cannot_sweep_it(tmp_path):
    survey = Survey.take(Catalog(Store(str(tmp_path))), pool=False)
    with pytest.raises(ValueError, match="without the pool"):
        sweep_pool(Catalog(Store(str(tmp_path))), survey=survey)
