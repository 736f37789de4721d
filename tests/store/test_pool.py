"""The store's blob pool: one content-addressed pool per store, shared by every session.

A second notebook with the same model writes only what differs; cleanup counts references
across every session; a store that had checkpoints before the pool keeps them, and their blobs
where they are; a signed checkpoint still reads only the bytes its own signed digests name.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.errors import CheckpointDamaged
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.integrity import check
from jupyter_pause.store.layout import blob_key, manifest_key, pending_key, pool_key, pool_prefix
from jupyter_pause.store.manifest import Manifest, canonical_body, checksum
from jupyter_pause.store.retention import collect, sweep_pool
from jupyter_pause.store.storage import Store
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process", "no_pause_env")

#: The shared model: 8 MiB of weights in four tensors, the same bytes in every notebook.
MODEL_BYTES = 4 * 512 * 1024 * 4


def _model() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    return {f"layer{i}": torch.randn(512 * 1024, generator=generator) for i in range(4)}


def _size(store: Store) -> int:
    return sum(entry.size for entry in store.list("").values())


def _take(url: str, session: str, key: str | None = None, **ns) -> Manifest:
    another_process()  # each checkpoint from a notebook of its own
    config = PauseConfig(signing_key=key or "", encrypt=False)
    return jp.checkpoint(store=url, session=session, namespace=ns, config=config).manifest


def _resume(url: str, session: str, key: str | None = None, ref: str = "latest") -> tuple[jp.ResumeResult, dict]:
    another_process()
    target: dict = {}
    config = PauseConfig(signing_key=key or "", encrypt=False)
    return jp.resume(ref, store=url, session=session, namespace=target, config=config), target


def test_a_second_notebook_with_the_same_model_writes_only_its_own_blobs(store_url):
    first = _take(store_url, "tune-a", model=_model(), head=torch.zeros(1000))
    store = Store(store_url)
    before = _size(store)
    second = _take(store_url, "tune-b", model=_model(), head=torch.ones(1000), lr=0.1)

    grown = _size(store) - before
    assert second.stats["bytes_written"] <= 0.05 * MODEL_BYTES, second.stats
    assert grown <= 0.05 * MODEL_BYTES, f"the store grew by {grown} bytes for a model of {MODEL_BYTES}"
    shared = {a.blob for a in first.arrays.values()} & {a.blob for a in second.arrays.values()}
    assert sum(second.blobs[b] for b in shared) >= MODEL_BYTES
    assert second.pool and second.session_blobs == [] and second.format == 2
    assert not store.list("sessions/tune-b/blobs/")  # nothing in the session's own folder
    _, target = _resume(store_url, "tune-b")
    assert all(torch.equal(target["model"][n], t) for n, t in _model().items()) and target["lr"] == 0.1
    assert check(store, second) == {} and check(store, first) == {}


def test_gc_after_one_notebooks_checkpoints_are_deleted_keeps_what_the_other_names(store_url):
    url = store_url
    gone = _take(url, "a", model=_model(), only_a=torch.full((300_000,), 1.0))
    kept = _take(url, "b", model=_model(), only_b=torch.full((300_000,), 2.0))
    store = Store(url)
    store.delete([manifest_key("a", gone.id)])  # the notebook's checkpoints are deleted by hand

    report = collect(Catalog(store), "a", grace=0, now=gone.created + 7200)
    only_a = {a.blob for v in gone.variables if v.name == "only_a" for a in map(gone.arrays.get, v.arrays)}
    removed = {item.key for item in report.items}
    assert {pool_key(b) for b in only_a} <= removed and not removed & {pool_key(b) for b in kept.blobs}
    assert report.bytes_freed >= 1_200_000 and check(store, kept) == {}
    _, target = _resume(url, "b")
    assert torch.equal(target["model"]["layer3"], _model()["layer3"]) and float(target["only_b"][0]) == 2.0


def test_a_pool_blob_named_only_by_another_sessions_checkpoint_being_written_stays(tmp_path):
    """Session b is writing a checkpoint that reuses a blob only session a's (now deleted)
    checkpoint named: its note names the blob, and cleanup of the pool leaves it."""
    url = str(tmp_path)
    gone = _take(url, "a", model=_model())
    store = Store(url)
    store.delete([manifest_key("a", gone.id)])
    for digest in gone.blobs:  # written two hours ago: past the grace period
        os.utime(store.path(pool_key(digest)), (time.time() - 7200, time.time() - 7200))
    note = {"id": "20990101-000000-abcdef", "created": time.time(), "blobs": sorted(gone.blobs)}
    store.write(pending_key("b", "20990101-000000-abcdef"), json.dumps(note).encode())
    assert sweep_pool(Catalog(store)).blobs_removed == 0
    assert all(store.exists(pool_key(b)) for b in gone.blobs)
    store.delete([pending_key("b", "20990101-000000-abcdef")])
    assert sweep_pool(Catalog(store)).blobs_removed == len(gone.blobs)


def _as_before_the_pool(root: Path, manifest: Manifest) -> None:
    """Turn a checkpoint into one written before the store had a pool (manifest format 1, its blobs
    in its session's folder), as an older release left it."""
    for digest in manifest.blobs:
        target = root / blob_key(manifest.session, digest)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(root / pool_key(digest), target)
    path = root / manifest_key(manifest.session, manifest.id)
    outer = json.loads(path.read_bytes())
    body = {k: v for k, v in outer["manifest"].items() if k not in ("pool", "session_blobs")}
    body["format"] = 1
    path.write_text(json.dumps({"manifest": body, "checksum": checksum(canonical_body(body))}))


def test_a_store_with_checkpoints_from_before_the_pool_migrates_without_a_rewrite(tmp_path):
    url, root = str(tmp_path), tmp_path
    model = _model()
    old = _take(url, "s", model=model, step=1)
    _as_before_the_pool(root, old)
    inodes = {d: (root / blob_key("s", d)).stat().st_ino for d in old.blobs}

    result, target = _resume(url, "s")  # reads its blobs from the session's folder
    assert result.manifest.format == 1 and not result.manifest.pool and target["step"] == 1
    target["step"] = 2
    new = jp.checkpoint(store=url, session="s", namespace=target).manifest  # the same process: it goes on

    assert new.pool and new.session_blobs and set(new.session_blobs) <= set(old.blobs)
    assert new.stats["bytes_written"] <= 0.05 * MODEL_BYTES, new.stats
    assert {d: (root / blob_key("s", d)).stat().st_ino for d in old.blobs} == inodes  # not rewritten
    assert not any((root / pool_key(d)).exists() for d in new.session_blobs)
    report = collect(Catalog(Store(url)), "s", grace=0, now=new.created + 7200)
    assert report.blobs_removed == 0 and report.kept == [new.id, old.id]
    assert all(check(Store(url), m) == {} for m in Catalog(Store(url)).checkpoints("s"))
    _, back = _resume(url, "s", ref=old.id)
    assert back["step"] == 1 and torch.equal(back["model"]["layer0"], model["layer0"])
    _, back = _resume(url, "s")
    assert back["step"] == 2 and torch.equal(back["model"]["layer2"], model["layer2"])


ALICE = "alice's signing key"


def test_a_signed_checkpoint_reads_only_the_bytes_its_own_digests_name(tmp_path):
    """With keys, a pool shared by every notebook weakens nothing: a checkpoint of another
    notebook copied in is refused by name, a blob swapped in the pool is refused by its sha256,
    and a manifest edited to name other blobs fails its signature."""
    url = str(tmp_path)
    own = _take(url, "a", ALICE, model=_model(), marker="A")
    other = _take(url, "b", ALICE, model=_model(), marker="B", extra=torch.full((300_000,), 5.0))
    assert own.hash == other.hash == "sha256"
    shutil.copyfile(tmp_path / manifest_key("b", other.id), tmp_path / manifest_key("a", other.id))
    result, target = _resume(url, "a", ALICE)
    assert target["marker"] == "A" and "found under session 'a'" in result.damaged[other.id]

    marker = next(v for v in own.variables if v.name == "marker").blob.key
    theirs = next(v for v in other.variables if v.name == "marker").blob.key
    names = Store(url, keys=ALICE).names  # with a key, the pool names its blobs by an HMAC of their digest
    (tmp_path / names.pool_key(marker)).write_bytes((tmp_path / names.pool_key(theirs)).read_bytes())  # the splice
    with pytest.raises(CheckpointDamaged, match=rf"{own.id} of session 'a' is damaged: blob .* checksum mismatch"):
        _resume(url, "a", ALICE, ref=own.id)

    path = tmp_path / manifest_key("b", other.id)
    outer = json.loads(path.read_bytes())
    outer["manifest"]["variables"][0]["blob"]["key"] = marker  # name another notebook's blob
    outer["checksum"] = checksum(canonical_body(outer["manifest"]))
    path.write_text(json.dumps(outer))
    with pytest.raises(CheckpointDamaged, match="signature: .*changed after it was signed"):
        _resume(url, "b", ALICE, ref=other.id)


def test_a_write_into_the_pool_cut_off_leaves_no_part_written_blob(tmp_path, monkeypatch):
    """Two notebooks may write the same blob at once: on a local folder it is written beside its
    key and moved into place whole. A writer killed before the move leaves a temporary file, which
    cleanup removes once it is past the grace period."""
    store = Store(str(tmp_path))
    digest = "ab" * 16
    store.write(pool_key(digest), b"whole")

    def killed(src, dst):
        raise KeyboardInterrupt  # the process dies between the write and the move

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        store.write(pool_key(digest), b"other bytes, cut off")
    monkeypatch.undo()
    assert bytes(store.read(pool_key(digest))) == b"whole"
    left = tmp_path / pool_key(digest)
    part = left.parent / f".{digest}.12345-678.part"  # as the killed writer's would have stayed
    part.write_bytes(b"other bytes, cut")
    assert sweep_pool(Catalog(store)).items == []  # young: it may be a write under way
    report = sweep_pool(Catalog(store), now=time.time() + 7200)
    assert sorted((i.kind, i.key) for i in report.items) == [
        ("blob", pool_key(digest)),
        ("upload", f"{pool_prefix()}ab/{part.name}"),
    ]
    assert not part.exists() and report.blobs_removed == 1 and not left.exists()  # nothing names the blob


def test_a_session_folder_found_empty_is_not_listed_again_and_one_with_blobs_is(tmp_path, monkeypatch):
    from jupyter_pause.store import pool
    from jupyter_pause.store.layout import blob_prefix

    listed = []
    real = Store.list
    monkeypatch.setattr(Store, "list", lambda self, prefix="": listed.append(prefix) or real(self, prefix))
    ns = {"a": torch.arange(1 << 20, dtype=torch.float32)}
    for _ in range(3):
        jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    assert listed.count(blob_prefix("s")) == 1  # the pool era: the session's own folder stays empty
    store = Store(str(tmp_path))
    key = blob_key("s", "ab" * 16)
    store.write(key, b"written before the pool")
    pool.forget()  # as a new process: the folder is listed, holds a blob, and is listed each time after
    for _ in range(2):
        jp.checkpoint(store=str(tmp_path), session="s", namespace=ns)
    assert listed.count(blob_prefix("s")) == 3
