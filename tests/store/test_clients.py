"""The filesystems a store talks through (store/clients.py): an object store's client is made on
its first use, and a store that could never be opened is refused when it is named."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from jupyter_pause.errors import StoreError
from jupyter_pause.store import clients, storage
from jupyter_pause.store.storage import Store

FIRST_USE = """
import json, sys
from jupyter_pause.store.storage import Store
store = Store("s3://bucket/prefix", {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}})
named = "s3fs" in sys.modules
path = store.path("a/b")
print(json.dumps([named, "s3fs" in sys.modules, path, store.local]))
"""


def test_an_object_stores_library_is_imported_on_first_use_not_when_the_store_is_named():
    out = subprocess.run([sys.executable, "-c", FIRST_USE], capture_output=True, text=True, check=True)
    named, used, path, local = json.loads(out.stdout)
    assert (named, used) == (False, True)  # importing s3fs takes a fifth of a second
    assert path == "bucket/prefix/a/b" and local is False


def test_a_folder_here_is_opened_at_once(tmp_path):
    store = Store(str(tmp_path / "store"))
    assert store.local and store.root == str(tmp_path / "store")
    assert clients.is_local("file:///x") and clients.is_local("/x") and not clients.is_local("memory://x")


def test_a_protocol_nobody_knows_is_refused_when_the_store_is_named():
    with pytest.raises(StoreError, match=r"cannot open store nosuch://b/x: Protocol not known: nosuch; check the URL"):
        Store("nosuch://b/x")


def test_a_protocol_whose_library_is_missing_is_refused_when_the_store_is_named(monkeypatch):
    monkeypatch.setitem(
        clients.known_implementations, "fakefs", {"class": "no_such_fsspec_library.FakeFS", "err": "Install fakefs"}
    )
    with pytest.raises(StoreError, match=r"cannot open store fakefs://b/x: Install fakefs; check the URL scheme"):
        Store("fakefs://b/x")


def test_a_client_that_cannot_be_made_fails_on_first_use_as_a_store_error(monkeypatch):
    def refused(url, options):
        raise TypeError("__init__() got an unexpected keyword argument 'no_such_option'")

    monkeypatch.setattr(storage, "filesystem", refused)
    store = Store("memory://lazy-options")
    with pytest.raises(StoreError, match=r"^cannot open store memory://lazy-options: .*'no_such_option'; check"):
        store.read("k")
