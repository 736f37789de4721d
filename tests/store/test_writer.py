"""BlobWriter: batches written in a thread, each named in the pending note before it is written."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from jupyter_pause.errors import StoreError
from jupyter_pause.store import signing
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.layout import blob_key, pending_key, pool_digest, pool_key, pool_prefix
from jupyter_pause.store.storage import Store
from jupyter_pause.store.writer import BlobWriter


def _d(data: bytes) -> str:
    """The digest a checkpoint names ``data`` by: a writer hashes what it finds under a name anyone can compute."""
    return signing.digest(data, "xxh3_128")


KEPT, NEW, OTHERS, HELD = _d(b"kept"), _d(b"new bytes"), _d(b"another session's"), _d(b"held")


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
        if pool_digest(key):
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
    """Whether the pool holds them (another session wrote them) or the session's own folder
    (written before the store had a pool: they stay there, and the checkpoint names them so)."""
    store = Store(str(tmp_path))
    store.write(blob_key("s", KEPT), b"kept")
    store.write(pool_key(OTHERS), b"another session's")
    progress: list[tuple[int, int]] = []
    writer = _writer(store, progress=lambda done, total: progress.append((done, total)))
    writer.send({KEPT: b"kept", NEW: b"new bytes", OTHERS: b"another session's"})
    assert writer.finish() == len(b"new bytes")
    assert progress[-1] == (len(b"new bytes"), len(b"new bytes"))
    assert writer.sizes == {KEPT: 4, NEW: 9, OTHERS: 17}
    assert writer.session_blobs == [KEPT] and store.read(pool_key(NEW)) == b"new bytes"
    assert not store.exists(pool_key(KEPT)) and not store.exists(blob_key("s", NEW))


def test_garbage_planted_under_a_predicted_name_is_written_over_not_trusted(tmp_path):
    """Without a key a blob's name is its digest, which anyone can compute (a tensor of zeros): a
    co-tenant's same-size garbage there, in the pool or the session's folder, is hashed and written over."""
    store = Store(str(tmp_path))
    zeros = bytes(4096)
    store.write(pool_key(_d(zeros)), b"\xff" * 4096)
    store.write(blob_key("s", KEPT), b"junk")
    writer = _writer(store)
    writer.send({_d(zeros): zeros, KEPT: b"kept"})
    assert writer.finish() == 4096 + 4 and writer.session_blobs == []
    assert store.read(pool_key(_d(zeros))) == zeros and store.read(pool_key(KEPT)) == b"kept"


def test_with_a_key_blobs_are_named_by_an_hmac_no_one_else_can_predict(tmp_path):
    """A name planted under the plain digest is never looked at; the blob goes under its keyed
    name, which another key names differently."""
    store = Store(str(tmp_path), keys="alice's key", encrypt=False)
    zeros = bytes(4096)
    store.write(pool_key(_d(zeros)), b"\xff" * 4096)
    writer = _writer(store)
    writer.send({_d(zeros): zeros})
    assert writer.finish() == 4096
    keyed = store.names.pool_key(_d(zeros))
    assert keyed != pool_key(_d(zeros)) and store.read(keyed) == zeros
    assert Store(str(tmp_path), keys="mallory's key").names.pool_key(_d(zeros)) != keyed


def test_the_pool_is_never_listed_only_asked_about_new_blobs(tmp_path, monkeypatch):
    """A pool shared by every session may hold millions of blobs: a checkpoint asks about its own."""
    store = Store(str(tmp_path))
    store.write(pool_key(HELD), b"held")
    listed: list[str] = []
    asked: list[str] = []
    real_list, real_sizes = Store.list, Store.sizes
    monkeypatch.setattr(Store, "list", lambda self, prefix: listed.append(prefix) or real_list(self, prefix))
    monkeypatch.setattr(Store, "sizes", lambda self, keys: real_sizes(self, asked.extend(keys) or asked[-len(keys) :]))
    writer = _writer(store)
    writer.send({"b" * 32: b"new", HELD: b"held"})
    writer.send({"b" * 32: b"new", "d" * 32: b"newer"})
    assert writer.finish() == 8
    assert pool_prefix() not in listed and "" not in listed
    assert sorted(asked) == sorted(pool_key(k) for k in ("b" * 32, HELD, "d" * 32, HELD))


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
    assert not store.exists(pool_key("b" * 32))


def test_hash_and_send_names_each_blob_by_its_digest_and_writes_it_once(tmp_path):
    from jupyter_pause.store import signing

    store = Store(str(tmp_path))
    writer = _writer(store)
    items = {"a0": b"x" * 5000, "a1": b"y" * 7000, "a2": b"x" * 5000}  # a2: same bytes as a0
    keys = writer.hash_and_send(items, "xxh3_128")
    named = {name: future.result(30) for name, future in keys.items()}
    assert named == {name: signing.digest(data, "xxh3_128") for name, data in items.items()}
    assert writer.finish() == 12_000
    assert store.read(pool_key(named["a1"])) == b"y" * 7000


@pytest.mark.parametrize("place", [pool_key, lambda digest: blob_key("s", digest)], ids=["pool", "session"])
def test_a_reused_blob_deleted_meanwhile_is_written_again(tmp_path, place):
    store = Store(str(tmp_path))
    store.write(place(KEPT), b"kept")
    writer = BlobWriter(Catalog(store), "s", "20260101-000000-abcdef", 1.0, reused_data_stays=True)
    writer.send({KEPT: b"kept"})  # stored already: reused, not written
    writer.wait_sent()
    store.delete([place(KEPT)])  # a cleanup that ran before the note named it
    assert writer.finish() == 4
    assert store.read(pool_key(KEPT)) == b"kept" and writer.session_blobs == []


@pytest.mark.parametrize("place", [pool_key, lambda digest: blob_key("s", digest)], ids=["pool", "session"])
def test_a_deleted_reused_blob_fails_the_checkpoint_when_its_data_may_have_changed(tmp_path, place):
    store = Store(str(tmp_path))
    store.write(place(KEPT), b"kept")
    writer = _writer(store)  # a background checkpoint: the live data was not copied
    writer.send({KEPT: b"kept"})
    writer.wait_sent()
    store.delete([place(KEPT)])
    with pytest.raises(StoreError, match="take the checkpoint again"):
        writer.finish()


def test_progress_across_threads_only_grows_and_ends_at_the_total(tmp_path):
    store = Store(str(tmp_path))
    seen: list[tuple[int, int]] = []
    writer = _writer(store, progress=lambda done, total: seen.append((done, total)))
    writer.send({f"{i:032x}": bytes([i]) * (1000 + i) for i in range(20)})
    writer.hash_and_send({f"a{i}": bytes([100 + i]) * (50_000 + i) for i in range(30)}, "xxh3_128")
    total = writer.finish()
    done = [d for d, _ in seen]
    assert done == sorted(done) and seen[-1] == (total, total)
    assert total == sum(1000 + i for i in range(20)) + sum(50_000 + i for i in range(30))


def test_a_block_that_ends_well_leaves_every_blob_written(tmp_path):
    store = Store(str(tmp_path))
    items = {f"{i:032x}": bytes([i]) * 10_000 for i in range(5)}
    with _writer(store) as writer:
        writer.send(items)
        writer.hash_and_send({"a0": b"z" * 20_000}, "xxh3_128")
    assert writer.written == 70_000  # known once the block is left, not later
    assert all(store.read(pool_key(key)) == data for key, data in items.items())


def test_an_error_in_the_block_propagates_and_leaves_no_checkpoint_and_no_torn_blob(tmp_path, monkeypatch):
    store = Store(str(tmp_path))
    real_write = Store.write

    def slow(self, key, data):
        if not pool_digest(key):
            return real_write(self, key, data)
        path = tmp_path / key  # a local write in two halves, so a torn blob could be seen
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(bytes(data[: len(data) // 2]))
            f.flush()
            time.sleep(0.2)
            f.write(bytes(data[len(data) // 2 :]))

    monkeypatch.setattr(Store, "write", slow)
    items = {f"{i:032x}": bytes([i]) * 100_000 for i in range(4)}
    with pytest.raises(KeyboardInterrupt):
        with _writer(store) as writer:
            writer.send(items)
            writer.wait_sent()
            time.sleep(0.05)  # the writes are under way
            raise KeyboardInterrupt
    listing = Catalog(store).listing("s")
    assert listing.checkpoints == [] and "20260101-000000-abcdef" in listing.pending
    for key in store.list(pool_prefix()):
        assert store.read(key) == items[key.rsplit("/", 1)[1]]  # whole, or not there at all


def test_a_failed_write_is_raised_when_the_block_ends(tmp_path, monkeypatch):
    def failing(self, items, progress=None):
        raise StoreError("cannot write: disk full")

    monkeypatch.setattr(Store, "write_many", failing)
    with pytest.raises(StoreError, match="disk full"):
        with _writer(Store(str(tmp_path))) as writer:
            writer.send({"a" * 32: b"x"})


def test_abandoned_on_error_leaves_the_finishing_to_another_thread(tmp_path):
    store = Store(str(tmp_path))
    writer = _writer(store)
    with writer.abandoned_on_error():
        writer.send({"a" * 32: b"first"})
    finishing = ThreadPoolExecutor(1)
    assert finishing.submit(writer.finish).result(30) == 5
    assert store.read(pool_key("a" * 32)) == b"first"
    with pytest.raises(ValueError, match="while describing"):
        with _writer(store).abandoned_on_error() as other:
            other.send({"b" * 32: b"second"})
            raise ValueError("failed while describing")
    assert Catalog(store).listing("s").checkpoints == []


def test_a_blob_asked_about_by_two_threads_at_once_is_not_written_while_the_store_holds_it(tmp_path, monkeypatch):
    store = Store(str(tmp_path))
    data = b"held already" * 1000
    key = signing.digest(data, "xxh3_128")
    store.write(pool_key(key), data)
    real = Store.sizes

    def slow(self, keys):  # a remote store's answer takes a while
        time.sleep(0.2)
        return real(self, keys)

    monkeypatch.setattr(Store, "sizes", slow)
    writer = _writer(store)
    writer.send({key: data})  # asked about in the writer's thread...
    writer.hash_and_send({"a0": data}, "xxh3_128")  # ...and, the same bytes, in a hashing thread
    assert writer.finish() == 0


def test_a_dict_the_caller_adds_to_after_send_is_written_as_it_was_sent(tmp_path, monkeypatch):
    """``send`` works in a thread of the writer's: what the caller adds to its dict afterwards (the
    checkpoint's payloads grow) belongs to a later send, and never breaks the one under way."""
    import threading

    store = Store(str(tmp_path))
    writer = _writer(store)
    asked, go_on = threading.Event(), threading.Event()
    real_look_up = BlobWriter.look_up

    def slow_look_up(self, payloads):
        asked.set()
        assert go_on.wait(30)
        return real_look_up(self, payloads)

    monkeypatch.setattr(BlobWriter, "look_up", slow_look_up)
    payloads = {"a" * 32: b"sent"}
    writer.send(payloads)
    assert asked.wait(30)
    payloads.update({f"{i:032x}": b"added after" for i in range(64)})  # while the send runs
    go_on.set()
    assert writer.finish() == len(b"sent")
    assert store.read(pool_key("a" * 32)) == b"sent" and not store.exists(pool_key(f"{0:032x}"))


def test_checkpoints_share_the_processs_threads_and_start_no_executor_of_their_own(tmp_path, monkeypatch):
    """Hashing, notes and writes run in the process's threads (``store.workers``), made once, not
    in four executors started and let go at every checkpoint."""
    store = Store(str(tmp_path))
    _writer(store).finish()  # whatever a first checkpoint of the process makes, it makes once
    made: list[str] = []
    real = ThreadPoolExecutor.__init__

    def counted(self, *args, **kwargs):
        made.append(kwargs.get("thread_name_prefix") or "")
        real(self, *args, **kwargs)

    monkeypatch.setattr(ThreadPoolExecutor, "__init__", counted)
    for i in range(3):
        writer = BlobWriter(Catalog(store), "s", f"2026010{i + 1}-000000-abcdef", 1.0)
        writer.send({f"{i:032x}": b"note first"})
        keys = writer.hash_and_send({"a0": bytes([i]) * 50_000}, "xxh3_128")
        assert writer.finish() == len(b"note first") + 50_000 and keys["a0"].result(30)
    assert [name for name in made if name.startswith("jupyter-pause")] == []


def test_a_writer_waits_for_its_own_work_only(tmp_path, monkeypatch):
    """The threads are shared, the waiting is not: a checkpoint whose write hangs (a slow store)
    keeps another from neither finishing nor being abandoned."""
    import threading

    store = Store(str(tmp_path))
    stuck, release = threading.Event(), threading.Event()
    real = Store.write_many

    def write_many(self, items, progress=None):
        if any(key.endswith("a" * 32) for key in items):
            stuck.set()
            assert release.wait(30)
        return real(self, items, progress)

    monkeypatch.setattr(Store, "write_many", write_many)
    slow = BlobWriter(Catalog(store), "s", "20260101-000000-aaaaaa", 1.0)
    slow.send({"a" * 32: b"slow"})
    assert stuck.wait(30)
    try:
        quick = BlobWriter(Catalog(store), "s", "20260101-000000-bbbbbb", 1.0)
        quick.send({"b" * 32: b"quick"})
        quick.hash_and_send({"a0": b"q" * 50_000}, "xxh3_128")
        assert quick.finish() == len(b"quick") + 50_000  # while the other's write still hangs
        with pytest.raises(ValueError, match="while describing"):
            with BlobWriter(Catalog(store), "s", "20260101-000000-cccccc", 1.0) as abandoned:
                abandoned.send({"c" * 32: b"abandoned"})
                raise ValueError("failed while describing")
        assert not release.is_set() and not store.exists(pool_key("a" * 32))
    finally:
        release.set()
    assert slow.finish() == len(b"slow") and store.read(pool_key("a" * 32)) == b"slow"
