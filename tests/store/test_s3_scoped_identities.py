"""Per-user S3 credentials on SeaweedFS: each access key confined to its own prefix of one bucket.

SeaweedFS's S3 gateway (``weed s3 -config=FILE``, ``weed mini -s3.config=FILE``) scopes an
identity's actions by bucket *and key prefix*: ``"Read:team-bucket/pause/alice/*"`` allows Read on
every key of ``team-bucket`` that starts with ``pause/alice/``. A trailing ``*`` makes the action a
prefix match, which is why the prefix must end in ``/*`` (``pause/alice*`` would match
``pause/alice2/`` too); an action with no ``:`` applies to every bucket, ``"Read:team-bucket"`` to
all of one bucket, and a path without ``*`` matches nothing.

These tests run a server with ``docs/seaweedfs-per-user-s3.json``, the example the README shows,
exactly as written but for the secrets (fresh ones here) and the admin's key pair (the test
server's, which ``tests/support/s3_server.py`` uses to create its bucket). The admin creates the example's
bucket; alice and mallory then each read and write their own prefix, and are refused writing,
reading, copying, listing and deleting under the other's, or next to their own prefix.

s3fs turns the refusals into ``PermissionError``, except for ``fs.rm``: its batch delete
(DeleteObjects) answers 200 with a per-key AccessDenied that s3fs does not raise, so a refused
delete is proven here by the object still being there.

Then the product itself with alice's key: ``Store.check`` passes on her empty prefix (she may
list it but not look at the bucket), a delete the server refuses raises ``StoreError``, and a
checkpoint to ``s3://team-bucket/pause/alice`` resumes and verifies, while one to mallory's
prefix fails and leaves nothing there.
"""

from __future__ import annotations

import contextlib
import copy
import json
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import jupyter_pause
from jupyter_pause.errors import StoreError
from jupyter_pause.store.storage import Store
from tests.support import s3_server
from tests.support.processes import another_process
from tests.support.s3_server import S3Server, running_server, use_aws_env

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "seaweedfs-per-user-s3.json"
#: The bucket and the prefix under which each user of the example gets a folder of their own.
BUCKET = "team-bucket"
PREFIX = "pause"
USERS = ("alice", "mallory")


@dataclass
class Identity:
    name: str
    key: str
    secret: str


@dataclass
class Cluster:
    server: S3Server
    admin: Identity
    users: dict[str, Identity]

    def fs(self, who: Identity | None) -> Any:
        """A fresh s3fs filesystem on the server as ``who`` (anonymous for None), no caches."""
        import s3fs

        credentials = {"anon": True} if who is None else {"key": who.key, "secret": who.secret}
        return s3fs.S3FileSystem(
            **credentials,
            client_kwargs={"endpoint_url": self.server.endpoint},
            skip_instance_cache=True,
            use_listings_cache=False,
        )

    def store(self, who: Identity, url: str) -> Store:
        """The product's ``Store`` at ``url`` with ``who``'s key pair, given explicitly."""
        return Store(url, {"key": who.key, "secret": who.secret, "endpoint_url": self.server.endpoint})

    def assert_empty(self, user: str) -> None:
        """Nothing at all under ``user``'s prefix, so their store is new: ``ls`` finds no such folder."""
        with pytest.raises(FileNotFoundError):
            self.fs(self.admin).ls(_home(user))


def _load_example() -> dict[str, Any]:
    with open(EXAMPLE) as f:
        return json.load(f)


def _test_config(example: dict[str, Any]) -> tuple[dict[str, Any], Identity, dict[str, Identity]]:
    """The example with fresh secrets, and the admin's key pair replaced by the test server's."""
    config = copy.deepcopy(example)
    admin = None
    users = {}
    for identity in config["identities"]:
        (credential,) = identity["credentials"]
        if identity["actions"] == ["Admin"]:
            credential.update(accessKey=s3_server.KEY, secretKey=s3_server.SECRET)
            admin = Identity(identity["name"], s3_server.KEY, s3_server.SECRET)
        else:
            credential["secretKey"] = secrets.token_hex(32)
            users[identity["name"]] = Identity(identity["name"], credential["accessKey"], credential["secretKey"])
    assert admin is not None, f"{EXAMPLE.name} has no identity whose only action is Admin"
    assert sorted(users) == sorted(USERS), f"{EXAMPLE.name} should define exactly {USERS}"
    return config, admin, users


@contextlib.contextmanager
def _running_cluster(folder: Path) -> Iterator[Cluster]:
    """``weed mini`` with the example's identities; the admin has created the example's bucket."""
    config, admin, users = _test_config(_load_example())
    path = folder / "s3.json"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    with running_server(path) as server:
        cluster = Cluster(server, admin, users)
        cluster.fs(admin).mkdir(BUCKET)
        yield cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The example's server, shared by this module's tests (each works in folders of its own)."""
    with _running_cluster(tmp_path_factory.mktemp("seaweedfs-identities")) as cluster:
        yield cluster


@pytest.fixture
def fresh_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The example's server for one test, with nothing yet under any user's prefix.

    A server of its own, because SeaweedFS keeps a folder once a key was written in it: after
    its keys are deleted, a listing still shows the folder, and the prefix is no longer empty.
    """
    with _running_cluster(tmp_path_factory.mktemp("seaweedfs-identities-fresh")) as cluster:
        yield cluster


def _home(user: str) -> str:
    return f"{BUCKET}/{PREFIX}/{user}"


def _other(user: str) -> str:
    (other,) = (u for u in USERS if u != user)
    return other


def test_example_scopes_each_user_to_their_own_prefix() -> None:
    """The documented file grants each user Read, Write and List under ``pause/<user>/*`` only."""
    example = _load_example()
    by_name = {identity["name"]: identity for identity in example["identities"]}
    for user in USERS:
        assert sorted(by_name[user]["actions"]) == sorted(
            f"{action}:{_home(user)}/*" for action in ("Read", "Write", "List")
        )


def test_admin_created_the_bucket_and_users_cannot_create_buckets(cluster: Cluster) -> None:
    admin = cluster.fs(cluster.admin)
    assert BUCKET in {b.rstrip("/") for b in admin.ls("", detail=False)}
    for user in cluster.users.values():
        fs = cluster.fs(user)
        with pytest.raises(PermissionError):
            fs.mkdir(f"{user.name}-bucket")
        with pytest.raises(PermissionError):
            fs.ls(BUCKET)  # the bucket's top level is outside every user's prefix
    assert not admin.exists(f"{USERS[0]}-bucket")


@pytest.mark.parametrize("user", USERS)
def test_user_writes_reads_lists_and_deletes_in_own_prefix(cluster: Cluster, user: str) -> None:
    fs = cluster.fs(cluster.users[user])
    folder = f"{_home(user)}/{uuid.uuid4().hex}"
    fs.pipe_file(f"{folder}/small", b"checkpoint", mode="create")
    # A multipart upload (three 5 MiB parts), as large checkpoint blobs are written.
    big = secrets.token_bytes(12 * 2**20)
    with fs.open(f"{folder}/big", "wb", block_size=5 * 2**20) as f:
        f.write(big)

    assert fs.cat_file(f"{folder}/small") == b"checkpoint"
    assert fs.cat_file(f"{folder}/big") == big
    assert sorted(fs.find(folder)) == [f"{folder}/big", f"{folder}/small"]
    assert fs.exists(f"{folder}/small")

    fs.rm_file(f"{folder}/small")
    fs.rm([f"{folder}/big"])
    admin = cluster.fs(cluster.admin)
    for name in ("small", "big"):
        assert not fs.exists(f"{folder}/{name}")
        assert not admin.exists(f"{folder}/{name}")


@pytest.mark.parametrize("user", USERS)
def test_user_is_refused_the_other_users_prefix(cluster: Cluster, user: str) -> None:
    other = _other(user)
    admin = cluster.fs(cluster.admin)
    fs = cluster.fs(cluster.users[user])
    run = uuid.uuid4().hex
    theirs = f"{_home(other)}/{run}"
    mine = f"{_home(user)}/{run}"
    cluster.fs(cluster.users[other]).pipe_file(f"{theirs}/secret", b"their checkpoint")
    fs.pipe_file(f"{mine}/own", b"my checkpoint")

    with pytest.raises(PermissionError):
        fs.pipe_file(f"{theirs}/planted", b"bad")
    with pytest.raises(PermissionError):
        fs.pipe_file(f"{theirs}/secret", b"overwritten")
    with pytest.raises(PermissionError):
        fs.cat_file(f"{theirs}/secret")
    with pytest.raises(PermissionError):
        fs.info(f"{theirs}/secret")
    with pytest.raises(PermissionError):
        fs.ls(_home(other))
    with pytest.raises(PermissionError):
        fs.copy(f"{theirs}/secret", f"{mine}/stolen")  # a server-side copy reads their key
    with pytest.raises(PermissionError):
        fs.copy(f"{mine}/own", f"{theirs}/planted")
    with pytest.raises(PermissionError):
        fs.rm_file(f"{theirs}/secret")
    # The batch delete is refused per key, which s3fs does not raise: the object must survive.
    with contextlib.suppress(PermissionError, OSError):
        fs.rm([f"{theirs}/secret"])

    assert admin.find(theirs) == [f"{theirs}/secret"]
    assert admin.cat_file(f"{theirs}/secret") == b"their checkpoint"
    assert admin.find(mine) == [f"{mine}/own"]


@pytest.mark.parametrize("user", USERS)
def test_user_is_refused_next_to_own_prefix(cluster: Cluster, user: str) -> None:
    """``pause/alice/*`` is a folder, not a string prefix: ``pause/alice-x/`` and ``pause/`` are out."""
    fs = cluster.fs(cluster.users[user])
    for path in (f"{_home(user)}-x/blob", f"{BUCKET}/{PREFIX}/blob", f"{BUCKET}/blob"):
        with pytest.raises(PermissionError):
            fs.pipe_file(path, b"bad")
    with pytest.raises(PermissionError):
        fs.ls(f"{BUCKET}/{PREFIX}")
    admin = cluster.fs(cluster.admin)
    assert not any(
        admin.exists(path) for path in (f"{_home(user)}-x/blob", f"{BUCKET}/{PREFIX}/blob", f"{BUCKET}/blob")
    )


def test_anonymous_and_unknown_keys_are_refused(cluster: Cluster) -> None:
    home = _home(USERS[0])
    cluster.fs(cluster.users[USERS[0]]).pipe_file(f"{home}/note", b"no")
    wrong_secret = Identity("forger", cluster.users[USERS[0]].key, secrets.token_hex(32))
    for who in (None, wrong_secret, Identity("stranger", "pause-stranger", secrets.token_hex(32))):
        fs = cluster.fs(who)
        with pytest.raises(PermissionError):
            fs.cat_file(f"{home}/note")
        with pytest.raises(PermissionError):
            fs.pipe_file(f"{home}/planted", b"bad")


# --- the product with a key confined to a prefix -------------------------------------------


def test_store_check_passes_on_an_empty_prefix_the_key_may_list(fresh_cluster: Cluster) -> None:
    """alice may list ``pause/alice/`` but not look at the bucket: her new, empty store is usable."""
    cluster = fresh_cluster
    alice = cluster.users["alice"]
    cluster.assert_empty("alice")
    fs = cluster.fs(alice)
    with pytest.raises(PermissionError):  # HeadBucket is refused her ...
        fs.info(BUCKET)
    assert not fs.exists(BUCKET)  # ... which s3fs's exists takes for a missing bucket
    store = cluster.store(alice, f"s3://{_home('alice')}")
    store.check()
    store.write("after-check", b"ok")
    store.check()
    assert store.read("after-check") == b"ok"
    store.delete(["after-check"])
    assert not cluster.fs(cluster.admin).exists(f"{_home('alice')}/after-check")


def test_store_check_refuses_the_other_users_prefix(cluster: Cluster) -> None:
    alice = cluster.users["alice"]
    with pytest.raises(StoreError, match=f"cannot reach store s3://{_home('mallory')}") as info:
        cluster.store(alice, f"s3://{_home('mallory')}").check()
    assert "does not exist" not in str(info.value)
    assert alice.secret not in str(info.value)


def test_store_check_still_names_a_missing_bucket(cluster: Cluster) -> None:
    with pytest.raises(StoreError, match="bucket 'no-such-team-bucket' does not exist"):
        cluster.store(cluster.admin, "s3://no-such-team-bucket/pause/alice").check()


def test_refused_delete_raises_and_absent_keys_stay_silent(cluster: Cluster) -> None:
    alice, mallory = cluster.users["alice"], cluster.users["mallory"]
    url = f"s3://{_home('alice')}/{uuid.uuid4().hex}"
    own = cluster.store(alice, url)
    own.write_many({"a/one": b"1", "a/two": b"2", "b/three": b"3"})
    admin = cluster.fs(cluster.admin)
    root = url[len("s3://") :]

    # mallory's key on alice's store: the server refuses each key of the batch delete.
    with pytest.raises(StoreError) as info:
        cluster.store(mallory, url).delete(["a/one", "gone", "a/two"])
    message = str(info.value)
    assert f"cannot delete 'a/one' in store {url}" in message
    assert "AccessDenied" in message
    assert "2 more key(s)" in message  # "gone" too: she may not even delete what is not there
    assert mallory.secret not in message
    assert sorted(admin.find(root)) == [f"{root}/a/one", f"{root}/a/two", f"{root}/b/three"]
    with pytest.raises(StoreError, match="cannot delete 'b/three'"):
        cluster.store(mallory, url).delete(["b/three"])

    # alice's own deletes: done, and a key that is not there is no error.
    own.delete(["a/one", "never-written", "a/two"])
    own.delete(["never-written"])
    own.delete([])
    assert admin.find(root) == [f"{root}/b/three"]
    assert sorted(own.list("")) == ["b/three"]
    own.delete(["b/three"])
    assert not admin.exists(f"{root}/b/three")


def _as(monkeypatch: pytest.MonkeyPatch, cluster: Cluster, who: Identity) -> None:
    """The standard AWS variables carry ``who``'s key pair and the server, as on their notebook server."""
    use_aws_env(
        monkeypatch,
        {
            "AWS_ENDPOINT_URL": cluster.server.endpoint,
            "AWS_ACCESS_KEY_ID": who.key,
            "AWS_SECRET_ACCESS_KEY": who.secret,
        },
    )


@pytest.mark.usefixtures("no_pause_env", "new_process")
def test_checkpoint_and_resume_with_a_key_confined_to_its_prefix(
    fresh_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented setup end to end: alice checkpoints to her new, empty prefix and resumes from it."""
    cluster = fresh_cluster
    cluster.assert_empty("alice")
    _as(monkeypatch, cluster, cluster.users["alice"])
    store = f"s3://{_home('alice')}"
    arr = np.random.default_rng(3).standard_normal((64, 64))
    first = jupyter_pause.checkpoint(store=store, session="train", namespace={"x": 1, "arr": arr})
    assert sorted(v.name for v in first.manifest.variables) == ["arr", "x"]
    written = cluster.fs(cluster.admin).find(_home("alice"))
    assert f"{_home('alice')}/sessions/train/checkpoints/{first.manifest.id}.json" in written

    another_process()  # resumed by a new kernel
    restored: dict = {}
    cycle = jupyter_pause.resume_and_verify(store=store, session="train", namespace=restored)
    assert cycle.result.manifest.id == first.manifest.id
    assert cycle.verdict.kind == "restored", cycle.verdict
    assert restored["x"] == 1
    np.testing.assert_array_equal(restored["arr"], arr)


@pytest.mark.usefixtures("no_pause_env", "new_process")
def test_checkpoint_to_another_users_prefix_fails_and_writes_nothing(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = cluster.users["alice"]
    admin = cluster.fs(cluster.admin)
    before = admin.find(_home("mallory"))
    _as(monkeypatch, cluster, alice)
    store = f"s3://{_home('mallory')}"
    with pytest.raises(StoreError) as info:
        jupyter_pause.checkpoint(store=store, session="train", namespace={"x": 1, "arr": np.arange(10)})
    # Refused at the check that comes first (she may not even list there), before any write.
    message = str(info.value)
    assert f"cannot reach store {store}: Access Denied" in message
    assert "check that the store is reachable and writable" in message
    assert alice.secret not in message
    # A write there, had the check let it through, is refused as well.
    with pytest.raises(StoreError, match=f"cannot write 'sessions/train/status.json' in store {store}: Access Denied"):
        cluster.store(alice, store).write("sessions/train/status.json", b"{}")
    assert admin.find(_home("mallory")) == before
