"""store.backends.direct: large S3 objects read by presigned GETs straight into their buffers, and
handed to s3fs whenever that road cannot read them as s3fs would."""

from __future__ import annotations

import os
import urllib.parse

import numpy as np
import pytest

from jupyter_pause.store.backends import direct
from jupyter_pause.store.buffers import REMOTE_BLOCK
from jupyter_pause.store.storage import Store
from tests.support.cut_link import cut_link
from tests.support.s3_server import S3Server

pytestmark = [pytest.mark.s3, pytest.mark.integration]


def spied(store: Store) -> list[bool]:
    """Whether each direct read of ``store`` brought the bytes back (False: handed to s3fs)."""
    seen: list[bool] = []
    road = store.backend.direct
    read = road.read

    def watched(path: str, size: int):
        got = read(path, size)
        seen.append(got is not None)
        return got

    road.read = watched
    return seen


@pytest.mark.parametrize(
    "size", [300 << 10, 2 * REMOTE_BLOCK, 3 * REMOTE_BLOCK + 5], ids=["one-get", "two-parts-one-get", "ranged"]
)
def test_a_blob_of_a_known_size_comes_straight_into_an_aligned_buffer(s3_env: str, size: int) -> None:
    store = Store(s3_env)
    data = os.urandom(size)
    store.write("blobs/b", memoryview(data))
    seen = spied(store)
    back = store.read("blobs/b", size=size)
    assert seen == [True] and back == data and not back.readonly
    assert np.frombuffer(back, np.uint8).__array_interface__["data"][0] % 64 == 0
    assert bytes(store.backend.copy_of(store.path("blobs/b"), size)) == data and seen == [True, True]


def test_a_blob_of_another_size_than_said_is_read_by_s3fs_as_it_is(s3_env: str) -> None:
    store = Store(s3_env)
    data = os.urandom(REMOTE_BLOCK + 5)
    store.write("blobs/short", data)
    seen = spied(store)
    assert store.read("blobs/short", size=REMOTE_BLOCK + 6) == data  # the manifest's check names it
    assert store.read("blobs/short", size=4 * REMOTE_BLOCK) == data  # ranges past its end
    assert seen == [False, False]


def test_a_missing_blob_is_reported_as_s3fs_reports_it(s3_env: str) -> None:
    store = Store(s3_env)
    seen = spied(store)
    with pytest.raises(FileNotFoundError):
        store.backend.read(store.path("blobs/gone"), 1 << 20, True)
    assert seen == [False]


def test_a_connection_dropped_mid_body_is_read_again_on_a_fresh_one(s3_server: S3Server) -> None:
    data = os.urandom(3 << 20)
    endpoint = urllib.parse.urlsplit(s3_server.endpoint)
    with cut_link((endpoint.hostname, endpoint.port), cuts=0, after=1 << 20) as link:
        options = {"key": s3_server.key, "secret": s3_server.secret, "endpoint_url": f"http://127.0.0.1:{link.port}"}
        store = Store(f"s3://{s3_server.bucket}/{os.urandom(6).hex()}", options)
        store.write("blobs/b", memoryview(data))
        seen = spied(store)
        cuts = link.cut
        link.cuts = link.connections + 1  # the next connection is cut a megabyte into its reply
        assert store.read("blobs/b", size=len(data)) == data
        assert seen == [True] and link.cut == cuts + 1


def linked(s3_server: S3Server, link_port: int) -> Store:
    """A fresh store of ``s3_server`` reached through a relay on ``link_port``."""
    options = {"key": s3_server.key, "secret": s3_server.secret, "endpoint_url": f"http://127.0.0.1:{link_port}"}
    return Store(f"s3://{s3_server.bucket}/{os.urandom(6).hex()}", options)


def test_a_stalled_connection_is_given_up_after_the_timeout_and_read_again(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(direct, "TIMEOUT", 1.0)
    data = os.urandom(3 << 20)
    endpoint = urllib.parse.urlsplit(s3_server.endpoint)
    with cut_link((endpoint.hostname, endpoint.port), cuts=0, after=1 << 20, stall=True) as link:
        store = linked(s3_server, link.port)
        store.write("blobs/b", memoryview(data))
        seen = spied(store)
        link.cuts = link.connections + 1  # the next connection goes silent a megabyte into its reply
        assert store.read("blobs/b", size=len(data)) == data
        assert seen == [True] and link.cut == 1


def test_a_plain_http_connection_serves_one_get_after_another(s3_server: S3Server) -> None:
    sizes = [300 << 10, 1 << 20, 5]
    endpoint = urllib.parse.urlsplit(s3_server.endpoint)
    with cut_link((endpoint.hostname, endpoint.port), cuts=0) as link:
        store = linked(s3_server, link.port)
        blobs = {f"blobs/{n}": os.urandom(n) for n in sizes}
        for key, data in blobs.items():
            store.write(key, memoryview(data))
        road = store.backend.direct
        before = link.connections
        for _ in range(2):
            for key, data in blobs.items():  # the last is empty of all but 5 bytes: one buffered read
                assert bytes(road.read(store.path(key), len(data))) == data
        assert link.connections == before + 1  # all six on this thread's one connection


@pytest.mark.parametrize(
    ("options", "env"),
    [
        ({"requester_pays": True}, {}),
        ({"s3_additional_kwargs": {"SSECustomerAlgorithm": "AES256"}}, {}),
        ({}, {"HTTPS_PROXY": "http://127.0.0.1:3128"}),
        ({}, {"http_proxy": "http://127.0.0.1:3128"}),
    ],
    ids=["requester-pays", "customer-key", "proxy", "proxy-lower"],
)
def test_what_only_s3fs_sends_keeps_every_read_on_s3fs(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, options: dict, env: dict
) -> None:
    for name in direct.PROXIES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    fs = s3_server.filesystem(**options)
    assert direct.DirectGet.of(fs) is None
    assert (direct.DirectGet.of(s3_server.filesystem()) is None) == bool(env)  # a proxy is for every request
