"""Retention and cleanup: last N per lineage, unreferenced blobs, abandoned partial writes."""

from __future__ import annotations

import json
import os
import time

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.integrity import check
from jupyter_pause.store.layout import blob_key, manifest_key, pending_key, pool_key, pool_prefix
from jupyter_pause.store.manifest import FORMAT, canonical_body, checksum
from jupyter_pause.store.retention import collect, sweep_pool
from jupyter_pause.store.storage import Store
from tests.support.plants import ANOTHER_KEY, COPIED, PLANTS, SEALED_BY_ANOTHER_KEY, UNSIGNED, plant_manifest
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")


def _series(store: str, count: int, session: str = "s") -> list[str]:
    ids = []
    ns = {"t": torch.zeros(100_000)}
    for i in range(count):
        ns["t"] = torch.full((100_000,), float(i))
        ids.append(jp.checkpoint(store=store, session=session, namespace=ns).manifest.id)
    return ids


def test_keep_last_n_removes_old_checkpoints_and_their_data(tmp_path):
    store = Store(str(tmp_path))
    ids = _series(str(tmp_path), 4)
    before = sum(e.size for e in store.list(pool_prefix()).values())
    report = collect(Catalog(store), "s", keep=2, grace=0)
    remaining = [m.id for m in Catalog(store).checkpoints("s")]
    assert remaining == ids[:1:-1]  # the two newest, newest first
    assert sorted(report.removed) == sorted(ids[:2]) and report.blobs_removed >= 2
    after = sum(e.size for e in store.list(pool_prefix()).values())
    assert before - after == report.bytes_freed >= 800_000
    target: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=target)
    assert float(target["t"][0]) == 3.0
    assert not check(store, Catalog(store).checkpoints("s")[-1])


def test_retention_is_per_lineage(tmp_path):
    _series(str(tmp_path), 3)
    another_process()  # another notebook under the same name
    _series(str(tmp_path), 1)
    collect(Catalog(Store(str(tmp_path))), "s", keep=1, grace=0)
    assert len({m.lineage for m in Catalog(Store(str(tmp_path))).checkpoints("s")}) == 2


def test_older_than_never_removes_the_newest(tmp_path):
    ids = _series(str(tmp_path), 2)
    report = collect(Catalog(Store(str(tmp_path))), "s", older_than=1, grace=0, now=time.time() + 3600)
    assert report.removed == [ids[0]] and report.kept == [ids[1]]


def test_dry_run_removes_nothing(tmp_path):
    _series(str(tmp_path), 3)
    report = collect(Catalog(Store(str(tmp_path))), "s", keep=1, grace=0, dry_run=True)
    assert len(report.removed) == 2 and "would remove" in report.summary()
    assert len(Catalog(Store(str(tmp_path))).checkpoints("s")) == 3


def test_abandoned_partial_write_is_cleaned_after_grace(tmp_path, monkeypatch):
    store = Store(str(tmp_path))
    _series(str(tmp_path), 1)

    def fail_midway(self, items, progress=None):
        Store.write(self, *next(iter(items.items())))
        raise OSError("connection lost")

    monkeypatch.setattr(Store, "write_many", fail_midway)
    with pytest.raises(OSError):
        jp.checkpoint(store=str(tmp_path), session="s", namespace={"t": torch.ones(300_000)})
    monkeypatch.undo()
    listing = Catalog(store).listing("s")
    assert len(listing.pending) == 1
    fresh = collect(Catalog(store), "s", keep=5)  # within the grace period: left alone
    assert fresh.abandoned == [] and fresh.blobs_removed == 0
    later = collect(Catalog(store), "s", keep=5, now=time.time() + 7200)
    assert later.abandoned == list(listing.pending) and later.blobs_removed == 1
    assert Catalog(store).listing("s").pending == {}
    assert len(Catalog(store).checkpoints("s")) == 1


def test_keep_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="at least 1"):
        collect(Catalog(Store(str(tmp_path))), "s", keep=0)


def test_a_pending_note_caught_mid_rewrite_keeps_every_blob(tmp_path):
    """A checkpoint being written rewrites its note per batch; gc must not guess its blobs."""
    store = Store(str(tmp_path))
    _series(str(tmp_path), 1)
    orphans = [blob_key("s", "ab" * 16), pool_key("ab" * 16)]
    for orphan in orphans:
        store.write(orphan, b"reused by the checkpoint being written")
        os.utime(store.path(orphan), (time.time() - 7200, time.time() - 7200))
    store.write(pending_key("s", "20990101-000000-abcdef"), b'{"id": "2099')  # torn
    assert collect(Catalog(store), "s", keep=5).blobs_removed == 0
    assert all(store.exists(orphan) for orphan in orphans)
    store.delete([pending_key("s", "20990101-000000-abcdef")])
    assert collect(Catalog(store), "s", keep=5).blobs_removed == 2


def test_a_checkpoint_of_a_newer_format_is_kept_with_every_blob_of_its_session(tmp_path):
    """A newer release sharing the store wrote it: this gc cannot read which blobs it needs."""
    store = Store(str(tmp_path))
    first, second = _series(str(tmp_path), 2)
    key = manifest_key("s", second)
    outer = json.loads(bytes(store.read(key)))
    outer["manifest"]["format"] = FORMAT + 1
    outer["checksum"] = checksum(canonical_body(outer["manifest"]))
    store.write(key, json.dumps(outer).encode())
    orphans = [blob_key("s", "ab" * 16), pool_key("ab" * 16)]
    for orphan in orphans:
        store.write(orphan, b"no checkpoint this release reads needs it")
    later = time.time() + 7200
    report = collect(Catalog(store), "s", now=later)
    assert report.newer == [second] and report.abandoned == [] and report.blobs_removed == 0
    assert report.kept == [first] and "1 checkpoint(s) of a newer format" in report.summary()
    assert store.exists(key) and all(store.exists(orphan) for orphan in orphans)
    swept = sweep_pool(Catalog(store), now=later)
    assert swept.blobs_removed == 0 and f"checkpoints this release cannot read ({second})" in swept.summary()
    assert check(store, Catalog(store).checkpoints("s")[0]) == {}


USER_KEY = "ab" * 32

#: What the report says of each plant, by whether the user's store is encrypted.
WHY_NOT_COUNTED = {
    (UNSIGNED, "on"): "not signed",
    (UNSIGNED, "off"): "not signed",
    (ANOTHER_KEY, "on"): "another key",
    (ANOTHER_KEY, "off"): "another key",
    (SEALED_BY_ANOTHER_KEY, "on"): "another key",
    (SEALED_BY_ANOTHER_KEY, "off"): "another key",
    (COPIED, "on"): "does not open here",
    (COPIED, "off"): "misplaced",
}


@pytest.fixture(params=["on", "off"])
def signed(request, tmp_path, monkeypatch):
    """Three checkpoints of session ``s`` by a user with a signing key (their store encrypted, or
    not); the store as that user opens it, and the ids, oldest first."""
    monkeypatch.setenv("JUPYTER_PAUSE_SIGNING_KEY", USER_KEY)
    monkeypatch.setenv("JUPYTER_PAUSE_ENCRYPT", "1" if request.param == "on" else "0")
    ids = _series(str(tmp_path), 3)
    return PauseConfig().open_store(str(tmp_path)), ids, request.param


@pytest.mark.parametrize("how", PLANTS)
def test_a_planted_newer_manifest_never_counts_toward_keep_nor_decides_what_goes(signed, tmp_path, how):
    """Attack 4 of issue 54: a co-tenant's manifest, newer than the user's, in their lineage.
    ``--keep 1`` keeps the user's newest and all it references, names the plant as not counted,
    keeps it and every blob; asked to, it removes the plant, and then the old blobs."""
    store, ids, encrypted = signed
    newest = Catalog(store).checkpoints("s", store.keys)[0]
    planted = plant_manifest(str(tmp_path), newest, how)
    pool = set(store.list(pool_prefix()))

    report = collect(Catalog(store), "s", keep=1, grace=0)
    assert report.kept == [ids[-1]] and report.removed == sorted(ids[:-1])
    assert list(report.not_counted) == [planted] and WHY_NOT_COUNTED[how, encrypted] in report.not_counted[planted]
    assert "1 manifest(s) not verified here, not counted" in report.summary()
    assert store.exists(manifest_key("s", planted)) and set(store.list(pool_prefix())) == pool
    target: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=target)
    assert float(target["t"][0]) == 2.0 and check(store, newest) == {}

    again = collect(Catalog(store), "s", keep=1, grace=0, remove_unverified=True)
    assert again.counts()["unverified"] == 1 and not store.exists(manifest_key("s", planted))
    assert again.blobs_removed >= 2 and again.kept == [ids[-1]]
    assert check(store, newest) == {}


def test_without_a_key_signed_checkpoints_are_never_pruned_nor_taken_for_torn(signed, tmp_path):
    """A gc run where no key is set (a laptop holding only the bucket's credential) cannot tell
    the user's checkpoints from a plant: it prunes none, and a sealed manifest is never torn."""
    store, ids, encrypted = signed
    planted = plant_manifest(str(tmp_path), Catalog(store).checkpoints("s", store.keys)[0], UNSIGNED)
    report = collect(Catalog(Store(str(tmp_path))), "s", keep=1, grace=0)
    assert report.removed == [] and report.counts()["torn"] == 0 and report.blobs_removed == 0
    if encrypted == "on":  # only the plant reads as a manifest: the user's are sealed, not counted
        assert sorted(report.not_counted) == sorted(ids) and report.kept == [planted]
    else:
        assert "no signing key is set here" in report.summary() and report.kept == [planted, *ids[::-1]]
    assert [m.id for m in Catalog(store).checkpoints("s", store.keys)] == ids[::-1]


def test_a_torn_manifest_is_still_garbage_with_a_key(signed, tmp_path):
    """A commit cut off mid-write left bytes that are no manifest: removed once past the grace
    period, as without a key; the user's checkpoints stay."""
    store, ids, _ = signed
    torn = manifest_key("s", "20991231-000000-abcdef")
    Store(str(tmp_path)).write(torn, b'{"manifest": {"id": "2099')
    report = collect(Catalog(store), "s", grace=0)
    assert report.counts()["torn"] == 1 and not store.exists(torn) and report.not_counted == {}
    assert [m.id for m in Catalog(store).checkpoints("s", store.keys)] == ids[::-1]
