"""BlobWriter: batches written in a thread, each named in the pending note before it is written."""

from __future__ import annotations

import json

import pytest

from jupyter_pause.catalog import Catalog, blob_key, pending_key
from jupyter_pause.errors import StoreError
from jupyter_pause.storage import Store
from jupyter_pause.writer import BlobWriter


def _writer(store: Store, progress=None) -> BlobWriter:
    return BlobWriter(Catalog(store), "s", "20260101-000000-abcdef", 1.0, progress=progress)


def test_every_blob_is_in_the_pending_note_before_it_is_written(tmp_path, monkeypatch):
    store = Store(str(tmp_path))
    real_write = Store.write
    seen: list[tuple[str, list[str]]] = []
    note: dict = {"blobs": []}

    def recording(self, key, data):
        if key == pending_key("s", "20260101-000000-abcdef"):
            real_write(self, key, data)
            note.update(json.loads(bytes(data)))  # the note as last written in full
            return
        if "/blobs/" in key:
            seen.append((key.rsplit("/", 1)[1], list(note["blobs"])))
        real_write(self, key, data)

    monkeypatch.setattr(Store, "write", recording)
    writer = _writer(store)
    writer.send({"a" * 32: b"first batch"})
    writer.send({"b" * 32: b"second batch", "c" * 32: b"!"})
    assert writer.finish() == len(b"first batch") + len(b"second batch") + 1
    assert sorted(key for key, _ in seen) == ["a" * 32, "b" * 32, "c" * 32]
    assert all(key in listed for key, listed in seen)


def test_blobs_already_stored_are_not_written_again(tmp_path):
    store = Store(str(tmp_path))
    store.write(blob_key("s", "a" * 32), b"kept")
    progress: list[tuple[int, int]] = []
    writer = _writer(store, progress=lambda done, total: progress.append((done, total)))
    writer.send({"a" * 32: b"kept", "b" * 32: b"new bytes"})
    assert writer.finish() == len(b"new bytes")
    assert progress[-1] == (len(b"new bytes"), len(b"new bytes"))
    assert writer.sizes == {"a" * 32: 4, "b" * 32: 9}


def test_a_failed_batch_stops_the_batches_after_it(tmp_path, monkeypatch):
    store = Store(str(tmp_path))
    calls: list[int] = []

    def failing(self, items, progress=None):
        calls.append(len(items))
        raise StoreError("cannot write: disk full")

    monkeypatch.setattr(Store, "write_many", failing)
    writer = _writer(store)
    writer.send({"a" * 32: b"x"})
    writer.send({"b" * 32: b"y"})
    with pytest.raises(StoreError, match="disk full"):
        writer.finish()
    assert calls == [1]
    assert not store.exists(blob_key("s", "b" * 32))
