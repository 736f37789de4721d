"""A tensor referenced in a model file is loaded only from a source whose bytes verify against the
digest in the user's manifest (``store.references``).

The pool's copy may be a co-tenant's garbage, or not open with the user's key; the copy where the
kernel read the file may have changed. Each such source is passed over and named, and the bytes
come from one that verifies: the local file, the Hugging Face cache's file of that sha256, or the
pool. Where none does, the blob is named damaged, with every source's reason.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jupyter_pause.hub.keys import user_key
from jupyter_pause.store import modelfiles, references
from jupyter_pause.store.layout import pool_key
from jupyter_pause.store.manifest import FileRange, Manifest, ModelFileRecord
from jupyter_pause.store.storage import Store
from tests.support.tensorfiles import tiny_safetensors

pytestmark = pytest.mark.usefixtures("new_process", "no_pause_env")

ALICE = user_key("a hub secret of at least thirty-two characters 7c0f", "alice")
ALGORITHM = "sha256"


def _checkpoint(store: Store, path: Path) -> Manifest:
    """A checkpoint of ``store`` referencing every tensor of the model file at ``path``, in the pool."""
    index = modelfiles.index_file(str(path), ALGORITHM)
    modelfiles.upload(store, str(path), index)
    refs = {t.digest: [FileRange(index.file, t.name, t.start, t.stop)] for t in index.tensors}
    return Manifest(
        id="20260101-000000-abcdef",
        session="tune",
        lineage="l",
        parent=None,
        created=0.0,
        trigger="manual",
        node="a",
        hash=ALGORITHM,
        pool=True,
        names=store.names.key_id,
        references=refs,
        model_files={index.file: ModelFileRecord(index.size, str(path))},
    )


def _expected(path: Path, manifest: Manifest) -> dict[str, bytes]:
    data = path.read_bytes()
    return {d: data[r[0].start : r[0].stop] for d, r in manifest.references.items()}


def _read(store: Store, manifest: Manifest) -> tuple[dict[str, bytes], dict[str, str], list[str]]:
    good, bad = references.read(store, manifest, manifest.references)
    return {d: bytes(b) for d, b in good.items()}, bad, references.passed_over(store, manifest)


def _spoil_pool(store: Store, manifest: Manifest) -> None:
    """A co-tenant's garbage of the right size where the pool holds the file (plaintext: read as is)."""
    (file,) = manifest.model_files
    Path(store.path(manifest.file_key(file, store.names))).write_bytes(b"\0" * manifest.model_files[file].size)


def test_a_garbage_pool_copy_is_passed_over_for_the_local_file_and_named(tmp_path):
    path = tiny_safetensors(tmp_path / "model.safetensors", 1)
    store = Store(str(tmp_path / "store"))
    manifest = _checkpoint(store, path)
    _spoil_pool(store, manifest)

    good, bad, passed = _read(store, manifest)
    assert good == _expected(path, manifest) and not bad
    (line,) = passed
    assert f"read from its copy where it was read {path}" in line
    assert "passed over the store's pool: checksum mismatch" in line and "put there by someone else" in line
    assert references.passed_over(store, manifest) == []  # said once


def test_the_hugging_face_cache_copy_stands_in_when_the_local_file_is_gone(tmp_path, monkeypatch):
    path = tiny_safetensors(tmp_path / "model.safetensors", 1)
    store = Store(str(tmp_path / "store"))
    manifest = _checkpoint(store, path)
    expected = _expected(path, manifest)
    (file,) = manifest.model_files
    blob = tmp_path / "hub" / "models--org--tiny" / "blobs" / file
    blob.parent.mkdir(parents=True)
    shutil.move(path, blob)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    _spoil_pool(store, manifest)

    good, bad, passed = _read(store, manifest)
    assert good == expected and not bad
    assert passed == [
        f"model file {file[:12]}: read from the Hugging Face cache's copy {blob}, passed over the store's pool: "
        "checksum mismatch (the model file's bytes differ: damaged, or put there by someone else)"
    ]


def test_a_tensor_no_source_verifies_is_never_given_and_each_source_named(tmp_path):
    path = tiny_safetensors(tmp_path / "model.safetensors", 1)
    store = Store(str(tmp_path / "store"))
    manifest = _checkpoint(store, path)
    _spoil_pool(store, manifest)
    path.write_bytes(tiny_safetensors(tmp_path / "other.safetensors", 2).read_bytes())  # the local file changed too

    good, bad, passed = _read(store, manifest)
    assert not good and set(bad) == set(manifest.references) and not passed
    assert all("pool: checksum mismatch" in why and "local: checksum mismatch" in why for why in bad.values())


def test_an_encrypted_pool_gives_verified_tensors_whole_and_by_range(tmp_path, monkeypatch):
    path = tiny_safetensors(tmp_path / "model.safetensors", 1)
    store = Store(str(tmp_path / "store"), keys=ALICE)
    manifest = _checkpoint(store, path)
    expected = _expected(path, manifest)
    path.unlink()
    assert not store.mappable
    assert _read(store, manifest)[:2] == (expected, {})  # most of the file wanted: read whole, opened
    monkeypatch.setattr(references, "WHOLE_SHARE", 2.0)
    assert _read(store, manifest)[:2] == (expected, {})  # a tensor at a time: ranged reads, opened


def test_a_copy_under_the_keyed_name_that_does_not_open_is_never_given(tmp_path):
    path = tiny_safetensors(tmp_path / "model.safetensors", 1)
    store = Store(str(tmp_path / "store"), keys=ALICE)
    manifest = _checkpoint(store, path)
    (file,) = manifest.model_files
    other = Store(str(tmp_path / "store"), keys=user_key("another hub secret, thirty-two chars or more", "x"))
    other.write(manifest.file_key(file, store.names), path.read_bytes())  # the right bytes, sealed by another key
    path.unlink()

    good, bad, _ = _read(store, manifest)
    assert not good and all("pool: unreadable" in why and "encrypted with another key" in why for why in bad.values())


def test_a_keyed_checkpoint_read_without_its_key_names_why(tmp_path):
    path = tiny_safetensors(tmp_path / "model.safetensors", 1)
    manifest = _checkpoint(Store(str(tmp_path / "store"), keys=ALICE, encrypt=False), path)
    path.unlink()

    good, bad, _ = _read(Store(str(tmp_path / "store")), manifest)
    assert not good and all(f"key id {manifest.names}" in why for why in bad.values())


def test_a_public_pool_name_is_never_read_for_a_keyed_checkpoint(tmp_path):
    path = tiny_safetensors(tmp_path / "model.safetensors", 1)
    store = Store(str(tmp_path / "store"), keys=ALICE, encrypt=False)
    manifest = _checkpoint(store, path)
    (file,) = manifest.model_files
    Path(store.path(manifest.file_key(file, store.names))).unlink()  # the user's copy gone
    Store(str(tmp_path / "store")).write(pool_key(file), path.read_bytes())  # the public name holds the bytes
    path.unlink()

    good, bad, _ = _read(store, manifest)
    assert not good and all("pool: missing" in why for why in bad.values())
