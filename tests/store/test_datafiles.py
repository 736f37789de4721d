"""Staging a data file from the store's pool onto a node, its bytes verified (``store.datafiles``)."""

from __future__ import annotations

import os

import pytest

from jupyter_pause.errors import IntegrityError, StoreError
from jupyter_pause.hub.keys import user_key
from jupyter_pause.store import datafiles, signing
from jupyter_pause.store.layout import pool_key
from jupyter_pause.store.storage import Store
from tests.support.stores import stored_bytes

DATA = b"arrow bytes " * 1000
ALICE = user_key("a hub secret of at least thirty-two characters 0d4e", "alice")


def _pooled(store_url: str, keys: str | None = None) -> tuple[Store, str]:
    store = Store(store_url, keys=keys)
    digest = signing.digest(DATA, "xxh3_128")
    store.write(store.names.pool_key(digest), DATA)
    return store, digest


def _stage(store: Store, digest: str, root: str, size: int = len(DATA)) -> str:
    return datafiles.stage(store, store.names.pool_key(digest), digest, size, "xxh3_128", root, "train.arrow")


def test_a_pool_file_is_staged_read_only_and_used_again(store_url, tmp_path):
    store, digest = _pooled(store_url)
    path = _stage(store, digest, str(tmp_path / "cache"))
    assert path == str(tmp_path / "cache" / digest / "train.arrow")
    assert open(path, "rb").read() == DATA and not os.stat(path).st_mode & 0o222
    store.delete([pool_key(digest)])
    assert _stage(store, digest, str(tmp_path / "cache")) == path


def test_an_encrypted_pool_file_is_staged_as_its_plaintext(store_url, tmp_path):
    store, digest = _pooled(store_url, ALICE)
    assert DATA[:64] not in stored_bytes(store_url, store.names.pool_key(digest))  # ciphertext in the store
    path = _stage(store, digest, str(tmp_path / "cache"))
    assert open(path, "rb").read() == DATA


def test_an_object_planted_under_the_pool_name_is_refused(tmp_path):
    store, digest = _pooled(str(tmp_path / "store"))
    store.write(pool_key(digest), b"x" * len(DATA))  # same name, same size, other bytes
    with pytest.raises(IntegrityError, match="does not hold data file train.arrow"):
        _stage(store, digest, str(tmp_path / "cache"))
    assert not list((tmp_path / "cache").rglob("*"))[1:]  # only the digest's empty folder


def test_an_object_sealed_by_another_key_is_refused(tmp_path):
    store, digest = _pooled(str(tmp_path / "store"), ALICE)
    mallory = Store(str(tmp_path / "store"), keys=user_key("a hub secret of at least thirty-two characters 0d4e", "m"))
    mallory.write(store.names.pool_key(digest), DATA)  # the right bytes, under alice's name, sealed by another key
    with pytest.raises(StoreError, match="could not be copied.*encrypted with another key"):
        _stage(store, digest, str(tmp_path / "cache"))
    assert not list((tmp_path / "cache").rglob("*"))[1:]


def test_a_file_missing_from_the_pool_is_named(tmp_path):
    store = Store(str(tmp_path / "store"))
    with pytest.raises(StoreError, match="not in the store's pool"):
        _stage(store, "0" * 32, str(tmp_path / "cache"), size=3)


def test_a_file_here_with_other_bytes_is_not_taken_for_the_kept_one(tmp_path):
    here = tmp_path / "train.arrow"
    here.write_bytes(DATA)
    digest = signing.digest(DATA, "xxh3_128")
    assert datafiles.holds(str(here), digest, len(DATA), "xxh3_128")
    here.write_bytes(DATA[:-1] + b"!")
    assert not datafiles.holds(str(here), digest, len(DATA), "xxh3_128")
