"""Fixtures the store-level tests share: a fresh, empty store URL on each backend (memory, a local
folder, the S3 test server), and no developer's JUPYTER_PAUSE_* settings."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import fsspec
import pytest

from jupyter_pause.config import ENV_VARS

BACKENDS = ["memory", "local", pytest.param("s3", marks=[pytest.mark.s3, pytest.mark.integration])]


@pytest.fixture
def no_pause_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep a developer's JUPYTER_PAUSE_* settings out of these tests."""
    for var in ENV_VARS.values():
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """A fresh, empty store URL on each backend."""
    if request.param == "memory":
        url = f"memory://pause-{uuid.uuid4().hex}"
        yield url
        fs = fsspec.filesystem("memory")
        root = url[len("memory:/") :]
        if fs.exists(root):
            fs.rm(root, recursive=True)
    elif request.param == "local":
        yield str(tmp_path / "store")
    else:
        yield request.getfixturevalue("s3_env")


def stored_bytes(url: str, key: str, options: dict | None = None) -> bytes:
    """The bytes at ``key`` as the store at ``url`` holds them (ciphertext where sealed): read
    past ``Store``, as anyone holding the store's credential without a key sees them."""
    from jupyter_pause.store.storage import Store

    store = Store(url, options)
    return bytes(store.fs.cat_file(store.path(key)))
