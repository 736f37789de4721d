"""In-loop periodic checkpoints (``loops/inloop.py``): the loop waits only for the copy, the
checkpoint commits the state of its safe point, the next one waits only for an unfinished one,
a background failure is reported, a kill mid-write leaves the previous checkpoint resumable."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.errors import StoreError
from jupyter_pause.loops import inloop, positions
from jupyter_pause.loops import steps as loops
from jupyter_pause.session import background, checkpoint
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store
from tests.support.cells import run_cell
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")


@pytest.fixture
def into(monkeypatch, tmp_path):
    """In-loop checkpoints of ``namespace`` go to a store under tmp_path (session ``loop``)."""
    store = str(tmp_path / "store")
    real = checkpoint.checkpoint_async
    monkeypatch.setattr(loops, "_clocks", {})  # each test's loop "train" counts from its first item

    def arrange(namespace):
        monkeypatch.setattr(
            checkpoint,
            "checkpoint_async",
            lambda **kw: real(store=store, session="loop", namespace=namespace, **kw),
        )
        return store

    yield arrange
    background.wait_for_background()
    inloop.pending = None
    positions.arm([], None)  # a resume in the test armed its loop's position


@pytest.fixture
def held_writes(monkeypatch):
    """The store's writes wait until the returned event is set."""
    release = threading.Event()
    real = Store.write_many

    def held(self, items, progress=None):
        release.wait(60)
        return real(self, items, progress)

    monkeypatch.setattr(Store, "write_many", held)
    yield release
    release.set()


#: Each item changes a tensor and a NumPy array in place and notes whether the background
#: checkpoint taken at the last safe point has committed yet.
LOOP = """
for i in jp.steps(range(items), every=every, name="train"):
    w.add_(1.0)
    a += 1.0
    committed.append(None if inloop.pending is None else inloop.pending.job.done)
    body(i)
"""


def _namespace(items, every, body=lambda i: None):
    torch.manual_seed(0)
    return {
        "jp": jp,
        "inloop": inloop,
        "items": items,
        "every": every,
        "w": torch.zeros(300_000),  # large enough for blobs of their own (copied into staging)
        "a": np.zeros(300_000),
        "committed": [],
        "body": body,
    }


def test_the_loop_goes_on_while_the_checkpoint_is_written_and_it_holds_the_safe_points_state(into, held_writes):
    ns = _namespace(items=5, every=3)
    store = into(ns)
    run_cell(LOOP, ns)
    # the checkpoint at the safe point after item 3 was still being written during items 4 and 5
    assert ns["committed"] == [None, None, None, False, False]
    assert float(ns["w"][0]) == 5.0
    held_writes.set()
    background.wait_for_background()
    (manifest,) = Catalog(Store(store)).checkpoints("loop")
    assert manifest.trigger == "periodic"
    ((record),) = manifest.loops
    assert record["done"] == 3 and record["description"] == "step 3"  # the position at the copy
    another_process()
    back: dict = {}
    jp.resume(manifest.id, store=store, session="loop", namespace=back)
    assert torch.equal(back["w"], torch.full((300_000,), 3.0))  # the safe point's, not the later values
    assert np.array_equal(back["a"], np.full(300_000, 3.0))
    assert back["committed"] == [None, None, None]


def test_the_next_periodic_checkpoint_waits_only_for_one_not_finished(into, monkeypatch):
    """Safe points 2, 4, 6: the first checkpoint's write is held until the loop body lets it go
    and sees it commit (item 3), so the second does not wait; the second's write is held until
    a timer lets it go, so the third waits for it."""
    release = {1: threading.Event(), 2: threading.Event()}
    real_write = Store.write_many

    def held(self, items, progress=None):
        n = len(checkpoints_started)
        if n in release:
            release[n].wait(60)
        return real_write(self, items, progress)

    checkpoints_started: list[bool] = []  # per in-loop checkpoint: was the previous one unfinished?
    real_wait = background.wait_for_background

    def noting_wait():
        current = background._current
        checkpoints_started.append(current is not None and not current.done)
        real_wait()

    def body(i):
        if i == 2:  # item 3: the checkpoint at safe point 2 is let go and seen committed
            release[1].set()
            inloop.pending.job.wait(60)
        if i == 4:  # item 5: the one at safe point 4 is let go only later, by a timer
            threading.Timer(0.5, release[2].set).start()

    ns = _namespace(items=6, every=2, body=body)
    store = into(ns)
    monkeypatch.setattr(Store, "write_many", held)
    monkeypatch.setattr(background, "wait_for_background", noting_wait)
    run_cell(LOOP, ns)
    real_wait()
    assert checkpoints_started == [False, False, True]
    done = sorted(r["done"] for m in Catalog(Store(store)).checkpoints("loop") for r in m.loops)
    assert done == [2, 4, 6]


def test_a_pause_at_a_later_safe_point_waits_for_the_background_one_then_takes_a_whole_checkpoint(into, held_writes):
    ns = _namespace(items=4, every=2)
    store = into(ns)
    taken = {}

    def pause(point):  # what a Pause does at a safe point: a synchronous checkpoint of its own
        if point.step == 3:
            threading.Timer(0.3, held_writes.set).start()
            taken["pause"] = jp.checkpoint(store=store, session="loop", namespace=ns, trigger="button").manifest
            taken["periodic done"] = inloop.pending.job.done

    loops.on_safe_point(pause)
    try:
        run_cell(LOOP, ns)
    finally:
        loops.remove(pause)
    periodic = [m for m in Catalog(Store(store)).checkpoints("loop") if m.trigger == "periodic"]
    assert taken["periodic done"]  # the pause waited for the one in flight
    assert taken["pause"].parent == periodic[-1].id and periodic[-1].loops[0]["done"] == 2
    assert taken["pause"].loops[0]["done"] == 3 and {"w", "a"} <= {v.name for v in taken["pause"].variables}


def test_a_background_failure_is_reported_at_the_next_safe_point_and_the_previous_stays(into, monkeypatch, capsys):
    ns = _namespace(items=4, every=2)
    store = into(ns)
    earlier = jp.checkpoint(store=store, session="loop", namespace={"x": 1}).manifest
    real = Store.write_many
    failing = threading.Event()

    def broken(self, items, progress=None):
        if failing.is_set():
            raise StoreError("cannot write: connection reset")
        return real(self, items, progress)

    def body(i):
        if i == 2:  # item 3: the checkpoint at step 2 has failed; the next safe point says so
            inloop.pending.job._done.wait(60)
            failing.clear()

    ns["body"] = body
    monkeypatch.setattr(Store, "write_many", broken)
    failing.set()
    run_cell(LOOP, ns)
    background.wait_for_background()
    err = capsys.readouterr().err
    assert err.count("periodic checkpoint at step 2 failed in the background (cannot write: connection reset)") == 1
    assert "the previous checkpoint stays the newest" in err
    ids = [m.id for m in Catalog(Store(store)).checkpoints("loop")]
    assert earlier.id in ids and len(ids) == 2  # the one at step 4 committed after the failure


def test_too_little_memory_to_copy_takes_the_checkpoint_before_the_loop_goes_on(into, monkeypatch, capsys):
    from jupyter_pause.session import staging

    def no_memory(nbytes):
        raise MemoryError

    ns = _namespace(items=2, every=2)
    store = into(ns)
    monkeypatch.setattr(staging, "take", no_memory)
    real_sync = checkpoint.checkpoint
    monkeypatch.setattr(
        checkpoint, "checkpoint", lambda **kw: real_sync(store=store, session="loop", namespace=ns, **kw)
    )
    run_cell(LOOP, ns)
    assert "too little free host memory" in capsys.readouterr().err
    (manifest,) = Catalog(Store(store)).checkpoints("loop")
    assert manifest.loops[0]["done"] == 2 and inloop.pending is None


# --- with real kernels ------------------------------------------------------------------------

#: In the kernel: after its first periodic checkpoint, every later blob write of the store waits
#: forever, and a file says when the second one's data is being written; another file says how
#: many steps the loop has done (written at each safe point: the kernel is busy with the loop).
HOLD_SECOND = """
import threading
from pathlib import Path
from jupyter_pause.loops import steps as loops
loops.on_safe_point(lambda point: Path('steps-done').write_text(str(len(losses))))
from jupyter_pause.store.storage import Store
_real_write, _writes = Store.write_many, []
def _held(self, items, progress=None):
    from jupyter_pause.store.catalog import Catalog
    if any('blobs/' in key for key in items) and Catalog(self).checkpoints('train'):
        Path('second-started').touch()
        threading.Event().wait()
    return _real_write(self, items, progress)
Store.write_many = _held
"""


@pytest.mark.integration
def test_a_kill_during_a_background_in_loop_checkpoint_leaves_the_previous_one_resumable(start_kernel, tmp_path):
    from tests.support.training import TRAINING, TRAINING_SETUP, uninterrupted_losses

    expected = uninterrupted_losses(start_kernel, tmp_path)

    store, env = tmp_path / "store", {"JUPYTER_PAUSE_SESSION": "train"}
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), **env)
    a.run(TRAINING_SETUP + "pace = 0.05\n" + HOLD_SECOND).ok()
    a.send(TRAINING)
    deadline = time.monotonic() + 90
    while not (tmp_path / "a" / "second-started").exists():
        assert time.monotonic() < deadline, "the second periodic checkpoint never started writing"
        time.sleep(0.02)
    # the loop goes on while the second checkpoint is being written (its write never ends)
    while int((tmp_path / "a" / "steps-done").read_text() or 0) < 12:
        assert time.monotonic() < deadline, "the loop did not go on during the background write"
        time.sleep(0.02)
    a.kill()
    (first,) = Catalog(Store(str(store))).checkpoints("train")
    batches = [r for r in first.loops if r["depth"] == 1 and not r["finished"]]
    assert first.trigger == "periodic" and [r["done"] for r in batches] == [5]

    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store), **env)
    resumed = b.run("%load_ext jupyter_pause\n%resume").ok().stdout
    assert "verdict: restored" in resumed and first.id in resumed
    assert len(b.value("losses")) == 5
    assert "continues where the checkpoint left it" in b.run(TRAINING).ok().stdout
    assert b.value("losses") == expected  # bit-identical, the same number of steps


SCRIPT = """
import time
import numpy as np
import jupyter_pause as jp
from jupyter_pause.store.storage import Store

_real = Store.write_many
def _slow(self, items, progress=None):  # each blob write takes a while: still running at the end
    time.sleep(0.5)
    return _real(self, items, progress)
Store.write_many = _slow

a = np.zeros(100_000)
for i in jp.steps(range(4), every=2, name="script"):
    a += 1
"""


@pytest.mark.integration
def test_a_scripts_last_in_loop_checkpoint_commits_before_it_exits(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**__import__("os").environ, "JUPYTER_PAUSE_STORE": str(tmp_path / "store"), "JUPYTER_PAUSE_SESSION": "s"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    newest = Catalog(Store(str(tmp_path / "store"))).checkpoints("s")[0]
    assert [r["done"] for r in newest.loops] == [4]  # the one at the loop's last safe point
