"""Staging a data file from the store's pool onto a node, its bytes verified (``store.datafiles``)."""

from __future__ import annotations

import os

import pytest

from jupyter_pause.errors import IntegrityError, StoreError
from jupyter_pause.store import datafiles, signing
from jupyter_pause.store.layout import pool_key
from jupyter_pause.store.storage import Store

DATA = b"arrow bytes " * 1000


def _pooled(store_url: str) -> tuple[Store, str]:
    store = Store(store_url)
    digest = signing.digest(DATA, "xxh3_128")
    store.write(pool_key(digest), DATA)
    return store, digest


def test_a_pool_file_is_staged_read_only_and_used_again(store_url, tmp_path):
    store, digest = _pooled(store_url)
    path = datafiles.stage(store, digest, len(DATA), "xxh3_128", str(tmp_path / "cache"), "train.arrow")
    assert path == str(tmp_path / "cache" / digest / "train.arrow")
    assert open(path, "rb").read() == DATA and not os.stat(path).st_mode & 0o222
    store.delete([pool_key(digest)])
    assert datafiles.stage(store, digest, len(DATA), "xxh3_128", str(tmp_path / "cache"), "train.arrow") == path


def test_an_object_planted_under_the_pool_name_is_refused(tmp_path):
    store, digest = _pooled(str(tmp_path / "store"))
    store.write(pool_key(digest), b"x" * len(DATA))  # same name, same size, other bytes
    with pytest.raises(IntegrityError, match="does not hold data file train.arrow"):
        datafiles.stage(store, digest, len(DATA), "xxh3_128", str(tmp_path / "cache"), "train.arrow")
    assert not list((tmp_path / "cache").rglob("*"))[1:]  # only the digest's empty folder


def test_a_file_missing_from_the_pool_is_named(tmp_path):
    store = Store(str(tmp_path / "store"))
    with pytest.raises(StoreError, match="not in the store's pool"):
        datafiles.stage(store, "0" * 32, 3, "xxh3_128", str(tmp_path / "cache"), "train.arrow")


def test_a_file_here_with_other_bytes_is_not_taken_for_the_kept_one(tmp_path):
    here = tmp_path / "train.arrow"
    here.write_bytes(DATA)
    digest = signing.digest(DATA, "xxh3_128")
    assert datafiles.holds(str(here), digest, len(DATA), "xxh3_128")
    here.write_bytes(DATA[:-1] + b"!")
    assert not datafiles.holds(str(here), digest, len(DATA), "xxh3_128")
