"""The storage layer (``jupyter_pause.store.storage.Store``) on memory, a local folder and real S3.

The S3 backend is the SeaweedFS server of ``tests/support/s3_server.py``, configured only through the
standard AWS variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``),
as a user would configure it.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Iterator

import numpy as np
import pytest
import torch

import jupyter_pause
from jupyter_pause.errors import StoreError
from jupyter_pause.session import lineage
from jupyter_pause.store import layout, mapping
from jupyter_pause.store.storage import REMOTE_BLOCK, Store
from tests.support.arena import Arena
from tests.support.lax_s3 import lax_store
from tests.support.s3_server import BUCKET, KEY, SECRET, S3Server, use_aws_env

# store_url (every backend) and no_pause_env: tests/support/stores.py, through conftest.py
pytestmark = pytest.mark.usefixtures("no_pause_env")

#: A payload above the 5 MiB multipart threshold of most S3 clients.
BIG = os.urandom(5 * 1024 * 1024 + 17)
#: Storage options that make an unreachable S3 endpoint fail fast.
FAST_FAIL = {"config_kwargs": {"connect_timeout": 1, "read_timeout": 2, "retries": {"max_attempts": 1}}}
#: Seconds within which an unreachable store must be reported.
FAIL_WITHIN = 20.0


@pytest.fixture
def store(store_url: str) -> Store:
    return Store(store_url)


@pytest.fixture
def dead_s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """AWS variables pointing at a port on 127.0.0.1 that refuses connections; yields the endpoint.

    The port stays bound (not listening) for the test, so nothing else can take it.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
        use_aws_env(
            monkeypatch,
            {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET},
        )
        yield endpoint


# --- bytes in, bytes out ------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"", b"hello", bytes(range(256)) * 3, BIG],
    ids=["empty", "small", "binary", "5MB"],
)
def test_write_then_read_returns_same_bytes(store: Store, data: bytes) -> None:
    store.write("a/b/blob", data)
    back = store.read("a/b/blob")
    assert not memoryview(back).readonly, "read must give a writable buffer for zero-copy arrays"
    if data:  # aligned as torch aligns its own CPU memory, so arrays built on it compute the same
        assert np.frombuffer(back, np.uint8).__array_interface__["data"][0] % 64 == 0
    assert len(back) == len(data)
    assert back == data


@pytest.mark.parametrize(
    "size", [0, 1000, REMOTE_BLOCK, 2 * REMOTE_BLOCK + 17], ids=["empty", "small", "one-part", "parts"]
)
def test_read_with_its_size_known_gives_the_same_aligned_writable_bytes(store: Store, size: int) -> None:
    data = os.urandom(size)
    store.write("blobs/sized", memoryview(data))
    back = store.read("blobs/sized", size=size)
    assert not memoryview(back).readonly and back == data
    if data:
        assert np.frombuffer(back, np.uint8).__array_interface__["data"][0] % 64 == 0
    assert store.read_many(["blobs/sized"], sizes={"blobs/sized": size})["blobs/sized"] == data
    assert bytes(store.backend.copy_of(store.path("blobs/sized"), size)) == data  # what a prefetch writes


def test_a_blob_shorter_than_its_size_says_comes_back_as_it_is(store: Store) -> None:
    data = os.urandom(REMOTE_BLOCK + 5)
    store.write("blobs/short", data)
    assert store.read("blobs/short", size=3 * REMOTE_BLOCK) == data  # integrity then names it truncated


def test_write_accepts_memoryview_and_rewrite_replaces(store: Store) -> None:
    payload = np.arange(1000, dtype=np.int32)
    store.write("k", memoryview(payload).cast("B"))
    assert store.read("k") == payload.tobytes()
    store.write("k", b"shorter")
    assert store.read("k") == b"shorter"


def test_read_of_missing_key_raises_file_not_found(store: Store) -> None:
    with pytest.raises(FileNotFoundError):
        store.read("no/such/key")


# --- listing ------------------------------------------------------------------------------


def test_list_gives_relative_keys_sizes_and_times_under_prefix_only(store: Store) -> None:
    inside = {"x/1": b"a", "x/sub/2": b"bb", "x/empty": b""}
    outside = {"xy/3": b"ccc", "y/4": b"dddd"}
    before = time.time()
    for key, data in {**inside, **outside}.items():
        store.write(key, data)
    after = time.time()

    for prefix in ("x/", "x"):
        listed = store.list(prefix)
        assert sorted(listed) == sorted(inside), f"list({prefix!r}) went outside its prefix"
        for key, entry in listed.items():
            assert entry.key == key
            assert entry.size == len(inside[key])
            assert entry.mtime is not None, f"no modification time for {key}"
            # S3 keeps whole seconds: allow a little slack either side.
            assert before - 2 <= entry.mtime <= after + 2, (key, entry.mtime, before, after)

    everything = store.list("")
    assert sorted(everything) == sorted({**inside, **outside})
    assert everything["y/4"].size == 4


def test_list_of_absent_prefix_is_empty(store: Store) -> None:
    assert store.list("nothing/here/") == {}
    store.write("somewhere/else", b"1")
    assert store.list("nothing/") == {}
    assert list(store.list("somewhere/")) == ["somewhere/else"]


def test_list_does_not_show_deleted_keys(store: Store) -> None:
    store.write("p/keep", b"1")
    store.write("p/drop", b"2")
    assert sorted(store.list("p/")) == ["p/drop", "p/keep"]
    store.delete(["p/drop"])
    assert sorted(store.list("p/")) == ["p/keep"]


# --- many keys at once --------------------------------------------------------------------


def test_write_many_then_read_many(store: Store) -> None:
    items = {f"many/{i:02d}": f"payload {i}".encode() * (i + 1) for i in range(20)}
    items["many/empty"] = b""
    store.write_many(items)

    found = store.read_many([*items, "many/missing", "many/00"])
    assert set(found) == {*items, "many/missing"}
    for key, data in items.items():
        assert found[key] == data, key
    assert isinstance(found["many/missing"], FileNotFoundError)
    assert sorted(store.list("many/")) == sorted(items)


@pytest.mark.parametrize("then", [False, True])
def test_small_objects_written_and_read_many_at_once(store: Store, then: bool) -> None:
    """``small=True``: on S3 each key is one request gathered on s3fs's loop (no HEAD first); the
    same answers as without, a missing key its ``FileNotFoundError``, progress and ``then`` too."""
    items = {f"small/{i:03d}.json": f'{{"n": {i}}}'.encode() for i in range(150)}
    items["small/empty"] = b""
    done: list[int] = []
    store.write_many(items, small=True)
    found = store.read_many(
        [*items, "small/missing"],
        progress=done.append,
        then=(lambda key, data: bytes(data).upper()) if then else None,
        small=True,
    )
    assert set(found) == {*items, "small/missing"}
    for key, data in items.items():
        assert bytes(found[key]) == (data.upper() if then else data), key
    missing = found["small/missing"]
    assert isinstance(missing, FileNotFoundError) and "small/missing not found" in str(missing)
    assert max(done) == sum(map(len, items.values()))
    assert sorted(store.list("small/")) == sorted(items)


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
def test_keys_read_into_memory_the_caller_chooses_land_there_and_no_other_does(store_url: str, sealed: bool) -> None:
    """``into``: a blob bound for a GPU is read into pinned memory (``serialize.pinned``); here an
    arena of the test's own stands in for it. A local blob it names is read, not mapped; sealed
    blobs open into it too."""
    store = Store(store_url, keys="reader's key 5e1d" if sealed else None, encrypt=sealed)
    blobs = {layout.blob_key("into", hashlib.sha256(d).hexdigest()): d for d in (BIG, b"x" * 1000, os.urandom(3 << 20))}
    routed, other = list(blobs)[:2], list(blobs)[2]
    store.write_many(blobs)
    arena = Arena()
    sizes = {k: len(d) for k, d in blobs.items()}
    found = store.read_many(blobs, mapped=True, sizes=sizes, into=lambda key: arena if key in routed else None)
    assert {k: bytes(v) for k, v in found.items()} == blobs
    assert all(arena.owns(found[k]) for k in routed) and not arena.owns(found[other])
    if store.local and not sealed:  # the blob no allocator was named for is still mapped from its file
        address = np.frombuffer(found[other], dtype=np.uint8).__array_interface__["data"][0]
        assert any(m.start <= address < m.end and m.path == store.path(other) for m in mapping.file_mappings())


def test_small_reads_of_an_unreachable_s3_store_are_store_errors(dead_s3: str) -> None:
    store = Store(f"s3://{BUCKET}/p", FAST_FAIL)
    (found,) = store.read_many(["a.json"], small=True).values()
    assert isinstance(found, StoreError) and f"s3://{BUCKET}/p" in str(found) and SECRET not in str(found)
    with pytest.raises(StoreError, match="cannot write"):
        store.write_many({"a.json": b"{}", "b.json": b"{}"}, small=True)


# --- delete and exists --------------------------------------------------------------------


def test_exists(store: Store) -> None:
    assert not store.exists("e/key")
    store.write("e/key", b"v")
    assert store.exists("e/key")
    assert not store.exists("e/other")


def test_delete_present_and_absent_keys(store: Store) -> None:
    store.write_many({"d/a": b"1", "d/b": b"2", "d/c": b"3"})

    store.delete(["d/a"])
    assert not store.exists("d/a")
    with pytest.raises(FileNotFoundError):
        store.read("d/a")
    assert store.read("d/b") == b"2"

    store.delete(["d/a"])  # already gone: no error
    store.delete(["d/b", "d/never-written"])  # a mix: the present one still goes
    assert not store.exists("d/b")
    store.delete([])
    assert sorted(store.list("d/")) == ["d/c"]


# --- reachability -------------------------------------------------------------------------


def test_check_passes_on_a_good_store_and_it_is_usable(store: Store) -> None:
    store.check()
    store.write("after-check", b"ok")
    store.check()
    assert store.read("after-check") == b"ok"


def test_check_creates_a_missing_local_folder(tmp_path) -> None:
    root = tmp_path / "not" / "yet"
    Store(str(root)).check()
    assert root.is_dir()


def test_unknown_scheme_raises_store_error_naming_the_store() -> None:
    with pytest.raises(StoreError) as info:
        Store("nosuch://x/y")
    message = str(info.value)
    assert "nosuch://x/y" in message
    assert "scheme" in message


def test_empty_url_raises_store_error() -> None:
    with pytest.raises(StoreError, match="no store URL"):
        Store("")


@pytest.mark.parametrize("action", ["write", "check", "read", "list", "exists"])
def test_unreachable_s3_raises_store_error_quickly(dead_s3: str, action: str) -> None:
    store = Store(f"s3://{BUCKET}/p", FAST_FAIL)
    started = time.monotonic()
    with pytest.raises(StoreError) as info:
        if action == "write":
            store.write("k", b"data")
        elif action == "check":
            store.check()
        elif action == "read":
            store.read("k")  # must not look like a missing key
        elif action == "list":
            store.list("sessions/")
        else:
            store.exists("k")
    elapsed = time.monotonic() - started
    assert elapsed < FAIL_WITHIN, f"{action} took {elapsed:.1f} s to report an unreachable store"
    assert f"s3://{BUCKET}/p" in str(info.value)
    assert SECRET not in str(info.value)


# --- secrets ------------------------------------------------------------------------------


def test_store_repr_hides_url_credentials(dead_s3: str) -> None:
    store = Store(f"s3://AKID:hunter2@{BUCKET}/x", FAST_FAIL)
    assert "hunter2" not in repr(store)
    assert "hunter2" not in store.display_url


def test_store_error_on_open_never_shows_url_secret() -> None:
    with pytest.raises(StoreError) as info:
        Store("nosuch://user:hunter2@host/x")
    assert "hunter2" not in str(info.value)
    assert "nosuch://***@host/x" in str(info.value)


@pytest.mark.parametrize("action", ["write", "check"])
def test_store_error_on_use_never_shows_url_secret(dead_s3: str, action: str) -> None:
    store = Store(f"s3://AKID:hunter2@{BUCKET}/x", FAST_FAIL)
    with pytest.raises(StoreError) as info:
        store.write("k", b"1") if action == "write" else store.check()
    assert "hunter2" not in str(info.value)


# --- S3 configuration ---------------------------------------------------------------------


@pytest.mark.s3
@pytest.mark.integration
def test_s3_store_takes_its_endpoint_from_aws_endpoint_url(s3_env: str, s3_server: S3Server) -> None:
    store = Store(s3_env)  # no storage options: the environment alone says where S3 is
    store.write("proof/key", b"on the test server")
    direct = s3_server.filesystem()
    assert direct.cat_file(f"{s3_env[len('s3://') :]}/proof/key") == b"on the test server"


@pytest.mark.s3
@pytest.mark.integration
@pytest.mark.parametrize("action", ["write", "check", "read"])
def test_s3_wrong_secret_raises_store_error(s3_env: str, monkeypatch: pytest.MonkeyPatch, action: str) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    # A fresh client: fsspec would otherwise reuse one made earlier with the right secret.
    store = Store(s3_env, {"skip_instance_cache": True})
    with pytest.raises(StoreError) as info:
        if action == "write":
            store.write("k", b"1")
        elif action == "check":
            store.check()
        else:
            store.read("k")  # refused, not "missing"
    assert s3_env in str(info.value)
    assert "not-the-secret" not in str(info.value)


@pytest.mark.s3
@pytest.mark.integration
@pytest.mark.parametrize("where", ["endpoint_url", "client_kwargs"])
def test_s3_endpoint_in_storage_options_wins_over_environment(
    s3_env: str, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as dead:
        dead.bind(("127.0.0.1", 0))
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{dead.getsockname()[1]}")
        options = {**FAST_FAIL}
        if where == "endpoint_url":
            options["endpoint_url"] = s3_server.endpoint
        else:
            options["client_kwargs"] = {"endpoint_url": s3_server.endpoint}
        store = Store(s3_env, options)
        store.write("k", b"explicit endpoint")
        assert store.read("k") == b"explicit endpoint"


# --- end to end through the public API ----------------------------------------------------


def _namespace() -> dict:
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(4, 8)).pow(2).sum().backward()
        opt.step()
    table = np.random.default_rng(7).standard_normal((100, 100))  # 80 KB
    return {"model": model, "opt": opt, "table": table}


def test_checkpoint_and_resume_round_trip(store_url: str) -> None:
    ns = _namespace()
    first = jupyter_pause.checkpoint(store=store_url, session="s3test", namespace=ns)
    assert sorted(v.name for v in first.manifest.variables) == ["model", "opt", "table"]
    assert first.manifest.stats["bytes_written"] >= ns["table"].nbytes

    second = jupyter_pause.checkpoint(store=store_url, session="s3test", namespace=ns)
    assert second.manifest.id != first.manifest.id
    # Nothing changed: the data blobs are already in the store and are not written again.
    assert second.manifest.stats["bytes_written"] < first.manifest.stats["bytes_written"] / 10
    assert second.manifest.stats["bytes_reused"] >= ns["table"].nbytes

    lineage.forget()  # as if a new process
    ns2: dict = {}
    result = jupyter_pause.resume(store=store_url, session="s3test", namespace=ns2)
    assert result.manifest.id == second.manifest.id
    assert result.complete, result.summary()
    assert sorted(result.restored) == ["model", "opt", "table"]

    np.testing.assert_array_equal(ns2["table"], ns["table"])
    assert ns2["table"].dtype == ns["table"].dtype
    saved, back = ns["model"].state_dict(), ns2["model"].state_dict()
    assert saved.keys() == back.keys()
    for name in saved:
        assert torch.equal(saved[name], back[name]), name
    saved_opt, back_opt = ns["opt"].state_dict(), ns2["opt"].state_dict()
    assert saved_opt["param_groups"] == back_opt["param_groups"]
    for index, state in saved_opt["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(back_opt["state"][index][name]))
    # The optimizer still drives the restored model's own parameters.
    assert ns2["opt"].param_groups[0]["params"][0] is next(ns2["model"].parameters())


@pytest.mark.s3
@pytest.mark.integration
def test_s3_missing_bucket_fails_the_check(s3_env: str) -> None:
    with pytest.raises(StoreError, match="bucket 'no-such-bucket-zz' does not exist"):
        Store("s3://no-such-bucket-zz/prefix").check()


@pytest.mark.s3
@pytest.mark.integration
def test_large_s3_blobs_are_never_held_twice_in_memory(s3_env: str) -> None:
    """Written and read a chunk at a time: the Python heap never holds a second whole copy."""
    import tracemalloc

    import numpy as np

    from jupyter_pause.store.storage import REMOTE_BLOCK, REMOTE_CHUNK

    store = Store(s3_env)
    data = np.random.default_rng(0).integers(0, 255, 96 << 20, dtype=np.uint8)
    store.write("warm-up", b"x")  # client and connection pool set up outside the measurement
    tracemalloc.start()
    try:
        store.write("big", memoryview(data))
        _, write_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        back = store.read("big")
        _, read_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert bytes(back[:1000]) == data[:1000].tobytes() and len(back) == data.nbytes
    assert back == memoryview(data)
    extra = 3 * REMOTE_BLOCK + REMOTE_CHUNK  # a part buffered, its copy being sent, one chunk; < the blob
    assert write_peak < extra, f"writing held {write_peak >> 20} MiB"
    assert read_peak < data.nbytes + extra, f"reading held {read_peak >> 20} MiB beyond the blob"


def test_create_writes_only_where_nothing_is(store: Store) -> None:
    assert store.create("journal/done/x", b"first") is True
    assert store.create("journal/done/x", b"second") is False
    assert bytes(store.read("journal/done/x")) == b"first"
    assert list(store.list("journal")) == ["journal/done/x"]  # no temporary name left behind


ATOMIC_CREATE = {"memory": False, "local": True, "s3": True}


def test_atomic_create_is_probed_per_backend_and_leaves_nothing(store_url: str, store: Store) -> None:
    """A local folder links; SeaweedFS refuses the second conditional put; memory only looks first."""
    backend = "s3" if store_url.startswith("s3://") else "local" if store.local else "memory"
    assert store.atomic_create is ATOMIC_CREATE[backend]
    assert store.list(layout.PROBES) == {} and store.list("") == {}


@pytest.mark.s3
@pytest.mark.integration
def test_a_server_that_ignores_the_condition_is_not_atomic(s3_env: str, s3_server: S3Server) -> None:
    store = lax_store(s3_server)
    assert store.atomic_create is False
    assert store.list("") == {}
    # Its creates still never replace what is there, by looking first.
    assert store.create("k", b"first") is True and store.create("k", b"second") is False
    assert bytes(store.read("k")) == b"first"


def test_a_listing_and_a_read_see_what_another_client_wrote_since(store_url: str) -> None:
    """s3fs remembers listings; a key written since by another process must not look absent."""
    here, there = Store(store_url), Store(store_url)
    here.write("sessions/s/status.json", b"1")
    assert list(here.list("sessions/s")) == ["sessions/s/status.json"]
    assert not here.exists("sessions/s/lease/x")
    there.write("sessions/s/lease/x", b"written elsewhere")
    there.write("sessions/s/status.json", b"longer now")
    assert here.exists("sessions/s/lease/x")
    assert list(here.list("sessions/s/lease")) == ["sessions/s/lease/x"]
    assert bytes(here.read("sessions/s/lease/x")) == b"written elsewhere"
    assert bytes(here.read("sessions/s/status.json")) == b"longer now"
    assert here.create("sessions/s/lease/x", b"again") is False


def test_an_object_store_opened_again_gets_its_client_again_until_its_credentials_may_have_changed(
    tmp_path, monkeypatch
):
    pytest.importorskip("s3fs")
    options = {"endpoint_url": "http://127.0.0.1:9"}  # never asked: making a client sends nothing
    credentials_file = tmp_path / "credentials"
    credentials_file.write_text("[default]\naws_access_key_id = one\naws_secret_access_key = x\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials_file))
    first = Store("s3://bucket/pause", options)
    assert Store("s3://bucket/pause", options).fs is first.fs  # a checkpoint's store: no new client
    assert Store("s3://bucket/other", options).fs is not first.fs
    monkeypatch.setenv("AWS_PROFILE", "another")  # the environment names other credentials
    second = Store("s3://bucket/pause", options)
    assert second.fs is not first.fs
    credentials_file.write_text("[default]\naws_access_key_id = two\naws_secret_access_key = y\n")
    os.utime(credentials_file, ns=(1, 1))  # rewritten, whatever the clock's resolution
    assert Store("s3://bucket/pause", options).fs is not second.fs
