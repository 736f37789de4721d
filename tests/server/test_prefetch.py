"""A resume's prefetch: the checkpoint's blobs copied onto this node while it waits and its kernel starts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import jupyter_pause as jp
from jupyter_pause import units
from jupyter_pause.config import PauseConfig
from jupyter_pause.server import prefetch
from jupyter_pause.store import memory, prefetched
from tests.support.processes import another_process
from tests.support.server_helpers import call, open_kernel, run, server_config, wait_state, write_notebook

pytestmark = pytest.mark.usefixtures("new_process", "no_pause_env")


@pytest.fixture
def s3_prefetch(s3_env: str, tmp_path: Path) -> Path:
    """The prefetch folder of a server on the S3 store ``jp_server_config`` gives it."""
    return tmp_path / "prefetch"


@pytest.fixture
def jp_server_config(s3_env: str, tmp_path: Path) -> dict:
    config = server_config(s3_env)
    config["PauseConfig"]["prefetch_dir"] = str(tmp_path / "prefetch")
    config["PauseConfig"]["prefetch_keep_free"] = 0.0  # whatever else this host's disk holds
    return config


async def kernels_of(jp_fetch, path: str) -> list[str]:
    sessions = json.loads((await jp_fetch("api", "sessions")).body)
    return [s["kernel"]["id"] for s in sessions if s["path"] == path and s.get("kernel")]


@pytest.fixture(params=["memory", "disk"])
def taken(request, tmp_path):
    """A checkpoint in a store that is not a local folder, and that store as a server opens it:
    with a shared memory folder, or with none (its copies go to disk)."""
    config = PauseConfig(
        store=f"memory://prefetch-{tmp_path.name}",
        prefetch_dir=str(tmp_path / "prefetch"),
        prefetch_memory_dir=str(tmp_path / "shm") if request.param == "memory" else "",
        prefetch_keep_free=0.0,  # whatever else this host's disk holds
    )
    ns = {"a": bytes(range(256)) * 4096, "b": b"x" * 300_000}
    manifest = jp.checkpoint(session="s", namespace=ns, config=config).manifest
    another_process()
    return config.open_store(), manifest


def _copies(store) -> tuple[set[Path], set[Path]]:
    """The copies in the store's prefetch folder: those in shared memory, those on disk."""
    near = store.prefetched
    found = [
        {p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")} if root and root.exists() else set()
        for root in (near.memory, near.root)
    ]
    return found[0], found[1]


def test_every_blob_is_copied_with_its_progress_and_removed_after(taken):
    store, manifest = taken
    fetching = prefetch.begin(store, manifest)
    fetching.finished.wait(30)
    paths = list(manifest.blob_keys(manifest.blobs, store.names))
    assert not fetching.why and all(store.prefetched.find(p) for p in paths)
    in_memory, on_disk = _copies(store)
    assert len(in_memory if store.prefetched.memory else on_disk) == len(paths)
    assert not (on_disk if store.prefetched.memory else in_memory)
    assert fetching.in_memory is bool(store.prefetched.memory)
    done = fetching.progress()
    assert done["bytes"] == done["total"] == sum(manifest.blobs.values()) and done["rate"] > 0
    assert fetching.said().startswith("prefetched ") and fetching.after("needs 1 CUDA device").startswith("needs 1")
    assert ("into shared memory" in fetching.said()) is fetching.in_memory
    fetching.discard()
    assert not any(store.prefetched.find(p) for p in paths) and _copies(store) == (set(), set())


def test_a_checkpoint_that_would_not_fit_twice_in_the_memory_left_is_copied_to_disk(taken, monkeypatch):
    store, manifest = taken
    if store.prefetched.memory is None:
        pytest.skip("no shared memory folder")
    total = sum(manifest.blobs.values())
    monkeypatch.setattr(memory, "available", lambda: 2 * total - 1)  # the kernel's own copy would not fit
    fetching = prefetch.begin(store, manifest)
    fetching.finished.wait(30)
    assert not fetching.why and not fetching.in_memory
    in_memory, on_disk = _copies(store)
    assert not in_memory and len(on_disk) == len(manifest.blobs)
    fetching.discard()
    monkeypatch.setattr(memory, "available", lambda: 2 * total)
    again = prefetch.begin(store, manifest)
    again.finished.wait(30)
    assert again.in_memory and len(_copies(store)[0]) == len(manifest.blobs)
    again.discard()


def test_what_the_kernel_claimed_first_is_left_to_it(taken):
    store, manifest = taken
    named = manifest.blob_keys(manifest.blobs, store.names)  # store key -> digest
    paths = list(named)
    theirs = paths[0]
    assert store.prefetched.claim(theirs)  # the resume's kernel reads it from the store
    fetching = prefetch.begin(store, manifest)
    fetching.finished.wait(30)
    assert not fetching.why
    assert store.prefetched.find(theirs) is None and all(store.prefetched.find(p) for p in paths[1:])
    store.prefetched.release(theirs)
    done = fetching.progress()
    assert (
        done["kernel_bytes"] == manifest.blobs[named[theirs]] and done["bytes"] + done["kernel_bytes"] == done["total"]
    )
    assert fetching.said().endswith(f"the kernel reading {units.size(done['kernel_bytes'])} itself")
    fetching.discard()
    assert not any(store.prefetched.find(p) for p in paths)


def test_a_copy_two_resumes_hold_stays_until_the_second_is_done(taken):
    store, manifest = taken
    first = prefetch.begin(store, manifest)
    first.finished.wait(30)
    assert not first.why
    second = prefetch.Prefetch(store, manifest)  # what the first copied is there already: nothing to fetch
    assert second.keys == []
    second.keys = list(first._held)  # a second resume of the same blobs, fetching them again
    second.start().finished.wait(30)
    first.discard()
    assert all(store.prefetched.find(p) for p in second._held)
    second.discard()
    assert not any(store.prefetched.find(p) for p in second._held)


def test_without_room_on_the_disk_nothing_is_copied_and_the_status_says_why(taken):
    store, manifest = taken
    store.prefetched.keep_free = 1.0  # no disk has its whole size free
    fetching = prefetch.begin(store, manifest)
    fetching.finished.wait(30)
    said = fetching.said()
    assert said.startswith("not prefetched: ") and "would leave less than 100%" in said, said
    assert said.endswith("lower PauseConfig.prefetch_keep_free")
    assert not any(store.prefetched.find(p) for p in manifest.blob_keys(manifest.blobs, store.names))
    fetching.discard()


def test_a_local_store_copies_nothing_and_reads_its_blob_files_into_the_page_cache(tmp_path, monkeypatch):
    config = PauseConfig(store=str(tmp_path / "store"), prefetch_dir=str(tmp_path / "p"))
    manifest = jp.checkpoint(session="s", namespace={"a": bytes(range(256)) * 4096}, config=config).manifest
    store = config.open_store()
    sent = []
    real = os.sendfile

    def sendfile(out, fd, offset, count):  # the reads asked of the kernel, passed on
        sent.append((os.readlink(f"/proc/self/fd/{fd}"), os.readlink(f"/proc/self/fd/{out}")))
        return real(out, fd, offset, count)

    monkeypatch.setattr(os, "sendfile", sendfile)
    fetching = prefetch.begin(store, manifest)
    assert fetching.finished.is_set() and fetching.said() == "" and fetching.progress() == {}
    assert fetching.advising is None and sent == []  # not before the resume waits or its kernel answered
    fetching.read_ahead()
    fetching.read_ahead()  # once
    fetching.advising.join(30)
    paths = {store.path(key) for key in manifest.blob_keys(manifest.blobs, store.names)}
    assert {path for path, _ in sent} == paths and {out for _, out in sent} == {os.devnull}
    assert not (tmp_path / "p").exists() or not any((tmp_path / "p").rglob("*.*"))  # no copies


def test_a_local_checkpoint_larger_than_the_memory_can_spare_is_not_read_ahead(tmp_path, monkeypatch):
    config = PauseConfig(store=str(tmp_path / "store"))
    manifest = jp.checkpoint(session="s", namespace={"a": bytes(range(256)) * 4096}, config=config).manifest
    monkeypatch.setattr(memory, "available", lambda: 2 * sum(manifest.blobs.values()) - 1)
    fetching = prefetch.begin(config.open_store(), manifest)
    fetching.read_ahead()
    assert fetching.paths and fetching.advising is None
    monkeypatch.setattr(memory, "available", lambda: 2 * sum(manifest.blobs.values()))
    fetching = prefetch.begin(config.open_store(), manifest)
    fetching.read_ahead()
    assert fetching.advising is not None


def test_a_server_takes_folders_of_its_own_and_removes_those_of_stopped_servers(tmp_path):
    root, shm = tmp_path / "prefetch", tmp_path / "shm"
    for base in (root, shm):
        stopped, running, mine = base / "server-999999999", base / "server-1", base / f"server-{os.getpid()}"
        for folder in (stopped, running, mine):
            (folder / "blobs").mkdir(parents=True)
    shm.chmod(0o700)
    config = PauseConfig(prefetch_dir=str(root), prefetch_memory_dir=str(shm))
    prefetch.claim(config)
    assert config.prefetch_dir == str(root / f"server-{os.getpid()}")
    assert config.prefetch_memory_dir == str(shm / f"server-{os.getpid()}")
    for base in (root, shm):
        assert not (base / f"server-{os.getpid()}").exists() and not (base / "server-999999999").exists()
        assert (base / "server-1").exists()  # pid 1 runs


def test_a_shared_memory_folder_created_here_is_this_users_alone(tmp_path):
    shm = tmp_path / "shm" / "jupyter-pause-test"
    config = PauseConfig(prefetch_dir=str(tmp_path / "prefetch"), prefetch_memory_dir=str(shm))
    prefetch.claim(config)
    assert config.prefetch_memory_dir == str(shm / f"server-{os.getpid()}")
    assert shm.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("whose", ["open to others", "another user's", "a link"])
def test_a_shared_memory_folder_others_can_open_is_not_used_and_the_log_says_why(tmp_path, caplog, whose):
    shm = tmp_path / "shm"
    if whose == "a link":  # planted where this user's folder would be, to wherever its maker reads
        (tmp_path / "theirs").mkdir(mode=0o700)
        shm.symlink_to(tmp_path / "theirs")
        said = "is not a folder"
    else:
        shm.mkdir(mode=0o700)
    if whose == "open to others":
        shm.chmod(0o755)  # another user of the node could read the copies
        said = "is open to other users (mode 755); make it 0700"
    elif whose == "another user's":
        if os.getuid() != 0:
            pytest.skip("only root can give a folder to another user")
        os.chown(shm, 4242, -1)  # made by another user, ahead of this one
        said = "belongs to another user (uid 4242)"
    config = PauseConfig(prefetch_dir=str(tmp_path / "prefetch"), prefetch_memory_dir=str(shm))
    prefetch.claim(config)
    assert config.prefetch_memory_dir == ""
    assert config.prefetch_dir == str(tmp_path / "prefetch" / f"server-{os.getpid()}")
    assert f"go to disk, not shared memory: {shm} {said}" in caplog.text


def test_without_a_prefetch_folder_no_shared_memory_is_used_either(tmp_path):
    config = PauseConfig(prefetch_dir="", prefetch_memory_dir=str(tmp_path / "shm"))
    prefetch.claim(config)
    assert config.prefetch_memory_dir == "" and not (tmp_path / "shm").exists()


@pytest.mark.integration
async def test_a_resume_from_s3_fetches_its_blobs_onto_the_node_and_leaves_none_behind(
    jp_fetch, jp_serverapp, jp_root_dir, s3_prefetch
):
    path = "prefetch/train.ipynb"
    write_notebook(jp_root_dir, path, "x = 1")
    kernel = await open_kernel(jp_fetch, path)
    before = await run(
        jp_serverapp,
        kernel,
        "import torch\nw = torch.arange(400_000, dtype=torch.float32) * 0.5\nprint(w.tolist()[-3:])",
    )
    await call(jp_fetch, "pause", path=path)
    assert (await wait_state(jp_fetch, path, ("paused", "failed")))["state"] == "paused"
    await call(jp_fetch, "resume", path=path)
    ready = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    fetched = ready["prefetched"]
    # what the server had not copied when the kernel answered, the kernel read itself
    assert fetched["bytes"] + fetched["kernel_bytes"] == fetched["total"] >= 1_600_000, ready
    assert "prefetched" in ready["detail"] or "restored" in ready["detail"], ready
    assert not any((s3_prefetch.parent / "shm").rglob("*.claim")), "claims are kept on disk"
    (kernel,) = await kernels_of(jp_fetch, path)
    assert await run(jp_serverapp, kernel, "print(w.tolist()[-3:])") == before
    left = [p for folder in (s3_prefetch, s3_prefetch.parent / "shm") for p in folder.rglob("*") if p.is_file()]
    assert left == [], left


def test_every_blob_is_claimed_as_the_prefetch_starts_and_copied_in_the_restores_order(taken, monkeypatch):
    """The kernel finds each blob claimed by the server and waits for its copy rather than
    reading the store beside it; the copies come in the order the restore reads them."""
    store, manifest = taken
    near = store.prefetched
    keys = manifest.blob_keys(manifest.blobs, store.names)
    copied: list[str] = []
    claimed_then: list[bool] = []
    copy_of = type(store.backend).copy_of

    def claims() -> list[Path]:
        return [p for root in near.roots if root.exists() for p in root.rglob("*.claim")]

    def watched(backend, path, size):
        claimed_then.append(len(claims()) == len(keys) - len(copied))
        copied.append(next(key for key in keys if store.path(key) == path))
        return copy_of(backend, path, size)

    monkeypatch.setattr(type(store.backend), "copy_of", watched)
    monkeypatch.setattr(prefetch, "PARALLELISM", 1)  # one copy after the other
    fetching = prefetch.begin(store, manifest)
    fetching.finished.wait(30)
    assert not fetching.why and fetching.progress()["kernel_bytes"] == 0
    assert claimed_then and all(claimed_then)  # every blob not yet copied was claimed all along
    assert [keys[key] for key in copied] == [d for d in manifest.needed() if d in manifest.blobs]
    assert not claims()  # every claim given up
    fetching.discard()


def test_a_prefetch_whose_folder_fills_up_stops_says_why_and_leaves_no_part_behind(taken, monkeypatch):
    store, manifest = taken
    near = store.prefetched
    placed: list[str] = []
    replace = os.replace

    def filling(part, target):  # the second copy is written, and the folder is full before it is placed
        if placed:
            raise OSError(28, "No space left on device")
        placed.append(str(target))
        replace(part, target)

    monkeypatch.setattr(prefetched.os, "replace", filling)
    monkeypatch.setattr(prefetch, "PARALLELISM", 1)  # one copy after the other
    fetching = prefetch.begin(store, manifest)
    fetching.finished.wait(30)
    assert fetching.said() == "prefetch stopped: [Errno 28] No space left on device", fetching.said()
    paths = manifest.blob_keys(manifest.blobs, store.names)
    assert [near.find(p) for p in paths if near.find(p)] == placed  # the copy placed before is whole
    everything = [p for root in near.roots if root.exists() for p in root.rglob("*")]
    assert not [p for p in everything if p.name.endswith((".part", ".claim"))]  # no part, every claim given up
    fetching.discard()
    assert not [p for p in everything if p.is_file()]
