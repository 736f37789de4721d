"""Model files in a shared store cannot be poisoned (``store.modelfiles``).

A co-tenant holding the store's credential knows a public model file's sha256 and its tensors'
digests, and plants before the user's first checkpoint: a garbage copy of the same size under
the file's public name, and an index record (its own, or one with other digests). Without a key
the user's upload hashes what lies there and writes over it; with a key the file and its index
go under names only the user's key gives, and a stored index is used only where it opens with
that key, for that file: any other is passed over, named, and the file indexed from its own bytes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from jupyter_pause.hub.keys import user_key
from jupyter_pause.store import modelfiles, seals, signing
from jupyter_pause.store.layout import file_index_key, pool_key
from jupyter_pause.store.modelfiles import FileIndex, Tensor
from jupyter_pause.store.storage import Store
from tests.support.stores import stored_bytes
from tests.support.tensorfiles import tiny_safetensors

pytestmark = pytest.mark.usefixtures("new_process", "no_pause_env")

SECRET = "a hub secret of at least thirty-two characters 7c0f"
ALICE, MALLORY = user_key(SECRET, "alice"), user_key(SECRET, "mallory")
ALGORITHM = "sha256"


def _plant(url: str, index: FileIndex, data: bytes, record: bytes | None = None) -> None:
    """What a co-tenant writes with the shared credential and no key of the user's: ``data`` under
    the file's public pool name and an index record (``record``, else ``index`` unsealed) beside it."""
    store = Store(url)
    store.write(pool_key(index.file), data)
    store.write(file_index_key(index.file, index.algorithm), record or index.to_record(None))


def _wrong_digests(index: FileIndex) -> FileIndex:
    tensors = [Tensor(t.name, t.start, t.stop, hashlib.sha256(t.name.encode()).hexdigest()) for t in index.tensors]
    return FileIndex(index.file, index.size, index.algorithm, tensors)


def _offered(store: Store, path: Path, claimed: str | None) -> modelfiles.ModelFile:
    offered = modelfiles.offer(store, str(path), ALGORITHM, claimed).result(60)
    offered.uploaded.result(60)
    return offered


def test_a_garbage_copy_under_the_public_name_is_written_over_without_a_key(store_url, tmp_path):
    path = tiny_safetensors(tmp_path / "model.safetensors", 1)
    index = modelfiles.index_file(str(path), ALGORITHM)
    _plant(store_url, index, b"\0" * index.size)  # same size, an index record beside it

    store = Store(store_url)
    assert not modelfiles.in_store(store, index)  # its bytes do not hash to the file's sha256
    modelfiles.upload(store, str(path), index)
    assert bytes(store.read(pool_key(index.file))) == path.read_bytes()
    modelfiles.forget()  # a new process finds the user's own copy by hashing it
    assert modelfiles.in_store(Store(store_url), index)


def test_with_a_key_the_file_goes_under_a_name_only_the_key_gives(store_url, tmp_path):
    path = tiny_safetensors(tmp_path / "model.safetensors", 1)
    index = modelfiles.index_file(str(path), ALGORITHM)
    _plant(store_url, index, path.read_bytes())  # even the right bytes: nothing of the user's trusts them

    store = Store(store_url, keys=ALICE)
    assert not modelfiles.in_store(store, index)
    modelfiles.upload(store, str(path), index)
    key = store.names.pool_key(index.file)
    assert key != pool_key(index.file) and bytes(store.read(key)) == path.read_bytes()
    stored = stored_bytes(store_url, key)
    assert path.read_bytes()[-256:] not in stored  # encrypted: the bucket holds ciphertext
    modelfiles.forget()
    assert modelfiles.in_store(Store(store_url, keys=ALICE), index)
    assert not modelfiles.in_store(Store(store_url, keys=MALLORY), index)  # her names are not alice's


def _sealed_by(keys: str, index: FileIndex, place_file: str | None = None) -> bytes:
    rows = [[t.name, t.start, t.stop, t.digest] for t in index.tensors]
    body = {"file": index.file, "size": index.size, "hash": index.algorithm, "tensors": rows}
    place = modelfiles.index_place(place_file or index.file, index.algorithm)
    return seals.sealed_json(body, signing.FILE_INDEX, place, keys)


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (lambda forged: forged.to_record(None), "not signed"),
        (lambda forged: _sealed_by(MALLORY, forged), "signed with another key"),
        (lambda forged: _sealed_by(ALICE, forged, "0" * 64), "a copy from elsewhere"),
    ],
    ids=["unsigned", "mallory's", "alice's for another file"],
)
def test_an_index_that_does_not_open_is_never_used(tmp_path, record, why):
    """A forged index placed where alice's key names it (as if it could be predicted): unsealed,
    sealed with mallory's key, or alice's own seal over another file's place. It is passed over,
    named, and the file indexed from its own bytes."""
    path = tiny_safetensors(tmp_path / "model.safetensors", 1)
    index = modelfiles.index_file(str(path), ALGORITHM)
    url = str(tmp_path / "store")
    store = Store(url, keys=ALICE, encrypt=False)  # plaintext: the seal, not the cipher, refuses it
    store.write(store.names.file_index_key(index.file, ALGORITHM), record(_wrong_digests(index)))

    offered = _offered(store, path, claimed=index.file)
    assert offered.index == index
    (note,) = offered.notes
    assert f"index of model file {path}" in note and why in note and "indexed again from its own bytes" in note
    opened, _ = modelfiles.stored_index(store, index.file, ALGORITHM, index.size)
    assert opened == index  # the upload wrote the user's own index over the forged one


def test_an_index_encrypted_with_another_key_does_not_open(tmp_path):
    path = tiny_safetensors(tmp_path / "model.safetensors", 1)
    index = modelfiles.index_file(str(path), ALGORITHM)
    url = str(tmp_path / "store")
    store = Store(url, keys=ALICE)
    forged = _sealed_by(MALLORY, _wrong_digests(index))
    Store(url, keys=MALLORY).write(store.names.file_index_key(index.file, ALGORITHM), forged)

    offered = _offered(store, path, claimed=index.file)
    assert offered.index == index and "encrypted with another key" in offered.notes[0]


def test_without_a_key_no_stored_index_is_used(store_url, tmp_path):
    path = tiny_safetensors(tmp_path / "model.safetensors", 1)
    index = modelfiles.index_file(str(path), ALGORITHM)
    _plant(store_url, index, b"\0" * index.size, _wrong_digests(index).to_record(None))

    offered = _offered(Store(store_url), path, claimed=index.file)
    assert offered.index == index and offered.holds_its_index() and not offered.notes
    assert stored_bytes(store_url, pool_key(index.file)) == path.read_bytes()


def test_the_users_own_sealed_index_is_used_and_its_file_verified(tmp_path):
    path = tiny_safetensors(tmp_path / "model.safetensors", 1)
    index = modelfiles.index_file(str(path), ALGORITHM)
    url = str(tmp_path / "store")
    modelfiles.upload(Store(url, keys=ALICE), str(path), index)
    modelfiles.forget()

    liar = tiny_safetensors(tmp_path / "other.safetensors", 2)  # same layout, other bytes, claiming the first's sha256
    offered = _offered(Store(url, keys=ALICE), liar, claimed=index.file)
    assert offered.index == index and not offered.notes  # the store's index, sealed by alice: used at once
    assert offered.verified.result(60) is False and not offered.holds_its_index()  # but the name lied
