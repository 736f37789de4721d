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
from jupyter_pause.store import readahead
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


@pytest.fixture
def taken(tmp_path):
    """A checkpoint in a store that is not a local folder, and that store as a server opens it."""
    config = PauseConfig(
        store=f"memory://prefetch-{tmp_path.name}",
        prefetch_dir=str(tmp_path / "prefetch"),
        prefetch_keep_free=0.0,  # whatever else this host's disk holds
    )
    ns = {"a": bytes(range(256)) * 4096, "b": b"x" * 300_000}
    manifest = jp.checkpoint(session="s", namespace=ns, config=config).manifest
    another_process()
    return config.open_store(), manifest


def test_every_blob_is_copied_with_its_progress_and_removed_after(taken):
    store, manifest = taken
    fetching = prefetch.begin(store, manifest)
    fetching.finished.wait(30)
    paths = list(manifest.blob_keys(manifest.blobs, store.names))
    assert not fetching.why and all(store.prefetched.find(p) for p in paths)
    done = fetching.progress()
    assert done["bytes"] == done["total"] == sum(manifest.blobs.values()) and done["rate"] > 0
    assert fetching.said().startswith("prefetched ") and fetching.after("needs 1 CUDA device").startswith("needs 1")
    fetching.discard()
    assert not any(store.prefetched.find(p) for p in paths)


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


def test_a_local_store_copies_nothing_and_asks_for_its_blob_files_to_be_read_ahead(tmp_path, monkeypatch):
    config = PauseConfig(store=str(tmp_path / "store"), prefetch_dir=str(tmp_path / "p"))
    manifest = jp.checkpoint(session="s", namespace={"a": bytes(range(256)) * 4096}, config=config).manifest
    store = config.open_store()
    advised = []
    real = os.posix_fadvise

    def posix_fadvise(fd, offset, length, advice):  # the readahead asked of the kernel, passed on
        advised.append((os.readlink(f"/proc/self/fd/{fd}"), advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", posix_fadvise)
    fetching = prefetch.begin(store, manifest)
    assert fetching.finished.is_set() and fetching.said() == "" and fetching.progress() == {}
    fetching.advising.join(30)
    paths = {store.path(key) for key in manifest.blob_keys(manifest.blobs, store.names)}
    assert {path for path, _ in advised} == paths and {a for _, a in advised} == {os.POSIX_FADV_WILLNEED}
    assert not (tmp_path / "p").exists() or not any((tmp_path / "p").rglob("*.*"))  # no copies


def test_a_local_checkpoint_larger_than_the_memory_can_spare_is_not_read_ahead(tmp_path, monkeypatch):
    config = PauseConfig(store=str(tmp_path / "store"))
    manifest = jp.checkpoint(session="s", namespace={"a": bytes(range(256)) * 4096}, config=config).manifest
    monkeypatch.setattr(readahead, "available_memory", lambda: 2 * sum(manifest.blobs.values()) - 1)
    fetching = prefetch.begin(config.open_store(), manifest)
    assert fetching.paths and fetching.advising is None
    monkeypatch.setattr(readahead, "available_memory", lambda: 2 * sum(manifest.blobs.values()))
    assert prefetch.begin(config.open_store(), manifest).advising is not None


def test_a_server_takes_a_folder_of_its_own_and_removes_those_of_stopped_servers(tmp_path):
    root = tmp_path / "prefetch"
    stopped, running, mine = root / "server-999999999", root / "server-1", root / f"server-{os.getpid()}"
    for folder in (stopped, running, mine):
        (folder / "blobs").mkdir(parents=True)
    config = PauseConfig(prefetch_dir=str(root))
    prefetch.claim(config)
    assert config.prefetch_dir == str(mine) and not mine.exists() and not stopped.exists()
    assert running.exists()  # pid 1 runs


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
    (kernel,) = await kernels_of(jp_fetch, path)
    assert await run(jp_serverapp, kernel, "print(w.tolist()[-3:])") == before
    left = [p for p in s3_prefetch.rglob("*") if p.is_file()]
    assert left == [], left
