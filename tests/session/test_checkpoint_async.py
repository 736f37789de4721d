"""``checkpoint_async``: the kernel waits only for the copy; the write goes on and commits last."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.errors import StoreError
from jupyter_pause.session import activity
from jupyter_pause.session.checkpoint import checkpoint_async
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")


def _state():
    torch.manual_seed(0)
    model = torch.nn.Linear(300, 300)
    return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.1), "big": torch.randn(500_000), "n": 3}


def test_async_restores_identically_to_sync(tmp_path):
    ns = _state()
    sync = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    job = checkpoint_async(store=str(tmp_path), session="s", namespace=ns)
    background = job.wait(60).manifest
    assert background.parent == sync.id
    assert [(v.name, v.digest) for v in background.variables] == [(v.name, v.digest) for v in sync.variables]
    assert {a.blob for a in background.arrays.values()} == {a.blob for a in sync.arrays.values()}
    another_process()
    target: dict = {}
    jp.resume(background.id, store=str(tmp_path), session="s", namespace=target)
    assert torch.equal(target["big"], ns["big"]) and torch.equal(target["model"].weight, ns["model"].weight)


def test_changes_after_the_call_do_not_reach_the_checkpoint(tmp_path, monkeypatch):
    ns = _state()
    before = ns["big"].clone()
    release = threading.Event()
    real = Store.write_many

    def slow(self, items, progress=None):
        release.wait(30)
        return real(self, items, progress)

    monkeypatch.setattr(Store, "write_many", slow)
    job = checkpoint_async(store=str(tmp_path), session="s", namespace=ns)
    assert not job.done
    ns["big"].add_(1.0)  # the user works on while the write is held back
    ns["n"] = 99
    release.set()
    manifest = job.wait(60).manifest
    another_process()
    target: dict = {}
    jp.resume(manifest.id, store=str(tmp_path), session="s", namespace=target)
    assert torch.equal(target["big"], before) and target["n"] == 3


def test_a_second_checkpoint_waits_for_the_first(tmp_path, monkeypatch):
    ns = _state()
    release = threading.Event()
    real = Store.write_many
    calls = []

    def held(self, items, progress=None):
        calls.append(time.monotonic())
        if len(calls) == 1:
            release.wait(30)
        return real(self, items, progress)

    monkeypatch.setattr(Store, "write_many", held)
    first = checkpoint_async(store=str(tmp_path), session="s", namespace=ns)
    threading.Timer(0.5, release.set).start()
    second = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    assert first.done and second.parent == first.wait().manifest.id


def test_a_failed_background_write_is_reported_and_commits_nothing(tmp_path, monkeypatch):
    ns = _state()
    earlier = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest

    def broken(self, items, progress=None):
        raise StoreError("cannot write: connection reset")

    monkeypatch.setattr(Store, "write_many", broken)
    job = checkpoint_async(store=str(tmp_path), session="s", namespace=ns)
    with pytest.raises(StoreError, match="connection reset"):
        job.wait(30)
    assert activity.current.state == "failed" and "connection reset" in activity.current.detail
    assert [m.id for m in Catalog(Store(str(tmp_path))).checkpoints("s")] == [earlier.id]


@pytest.mark.integration
def test_async_magic_then_immediate_kill_never_leaves_half_a_checkpoint(start_kernel, tmp_path):
    store = tmp_path / "store"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="k")
    a.run("%load_ext jupyter_pause\nimport torch\nmarker = 'first'\n%checkpoint").ok()
    out = a.run("marker = 'second'\nbig = [torch.randn(2_000_000) for _ in range(30)]\n%checkpoint --async").ok().stdout
    assert "writing the checkpoint in the background" in out
    a.kill()  # before the background write can have finished
    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="k")
    resumed = b.run("%load_ext jupyter_pause\n%resume").ok().stdout
    assert "verdict: restored" in resumed
    if b.value("marker") == "second":
        assert b.value("len(big)") == 30
    else:
        assert b.value("'big' in dir()") is False


@pytest.mark.integration
def test_async_magic_reports_its_summary_after_a_later_cell(start_kernel, tmp_path):
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(tmp_path / "store"), JUPYTER_PAUSE_SESSION="r")
    a.run("%load_ext jupyter_pause\nimport torch\nw = torch.randn(1_000_000)\n%checkpoint --async").ok()
    later = ""
    for _ in range(50):
        later += a.run("import time; time.sleep(0.1)").ok().stdout
        if "saved" in later:
            break
    assert "saved 1 variable(s)" in later and "of session 'r'" in later
    more = a.run("x = 1").ok().stdout + a.run("x = 2").ok().stdout
    assert "saved" not in more  # reported once, then the hook is gone


def test_only_data_the_store_lacks_is_copied_and_later_changes_never_leak(tmp_path, monkeypatch):
    ns = {"kept": torch.randn(1_000_000), "changed": torch.randn(1_000_000)}
    checkpoint_async(store=str(tmp_path), session="s", namespace=ns).wait(60)
    ns["changed"].mul_(2)
    expected = {k: v.clone() for k, v in ns.items()}
    copied: list[int] = []
    real = np.copyto

    def counting(dst, src, *args, **kwargs):
        copied.append(src.nbytes)
        return real(dst, src, *args, **kwargs)

    monkeypatch.setattr(np, "copyto", counting)
    job = checkpoint_async(store=str(tmp_path), session="s", namespace=ns)
    ns["kept"].add_(1)  # both change right after the call returns
    ns["changed"].add_(1)
    manifest = job.wait(60).manifest
    assert copied == [4_000_000]  # the changed tensor only: the other's blob was stored
    another_process()
    back: dict = {}
    jp.resume(manifest.id, store=str(tmp_path), session="s", namespace=back)
    assert torch.equal(back["kept"], expected["kept"]) and torch.equal(back["changed"], expected["changed"])


def test_the_staging_buffer_is_kept_for_the_next_background_checkpoint(tmp_path):
    from jupyter_pause.session import staging

    staging.release()
    ns = {"w": torch.randn(1_000_000)}
    checkpoint_async(store=str(tmp_path), session="s", namespace=ns).wait(60)
    kept = staging.kept_bytes()
    assert kept >= 4_000_000
    first = staging.take(kept)
    ns["w"].add_(1)
    expected = ns["w"].clone()
    job = checkpoint_async(store=str(tmp_path), session="s", namespace=ns)
    second = staging.take(kept)
    assert np.shares_memory(first, second)  # the same memory, not a new allocation
    ns["w"].add_(1)  # after the call: the copy in the kept buffer is what gets written
    manifest = job.wait(60).manifest
    another_process()
    back: dict = {}
    jp.resume(manifest.id, store=str(tmp_path), session="s", namespace=back)
    assert torch.equal(back["w"], expected)
    staging.release()
    assert staging.kept_bytes() == 0


def test_too_little_memory_for_the_copy_says_what_to_do_and_writes_nothing(tmp_path, monkeypatch):
    from jupyter_pause.errors import SerializationError
    from jupyter_pause.session import staging

    ns = {"w": torch.randn(1_000_000)}
    earlier = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    ns["w"].add_(1)

    def no_memory(nbytes):
        raise MemoryError

    monkeypatch.setattr(staging, "take", no_memory)
    with pytest.raises(SerializationError, match="without --async"):
        checkpoint_async(store=str(tmp_path), session="s", namespace=ns)
    assert [m.id for m in Catalog(Store(str(tmp_path))).checkpoints("s")] == [earlier.id]
    monkeypatch.undo()
    assert jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest.parent == earlier.id
