"""SIGTERM reaching into a running cell, with real kernels: at a ``steps`` loop's next safe point
(continued exactly after a resume), or mid-cell, marked so, when no safe point comes in time."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from jupyter_pause.protocol import SafePointRequest, channel
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store
from tests.support.kernels import kernel_of_its_own
from tests.support.training import LOSSES, SETUP, STEPS, TRAIN, setup_with

pytestmark = pytest.mark.integration


def wait_for(check, timeout: float, what: str):
    """Poll ``check`` until it gives something true; that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def marker_of(kernel, runtime: str) -> Path:
    """The kernel's marker: it exists once the kernel's loop has reached a safe point."""
    return Path(runtime) / channel.marker_path(kernel.pid).name


def terminate(kernel) -> int:
    """SIGTERM the kernel; its exit status once it has ended."""
    process = kernel.manager.provisioner.process
    os.kill(kernel.pid, signal.SIGTERM)
    status = process.wait(timeout=60)
    kernel.close()
    return status


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """``uninterrupted(setup)``: the losses of the training cell after ``setup``, never paused, in
    a kernel of its own. The run is seeded, so it is the same for every test of the module: each
    setup runs once, and every resumed run must match it bit for bit."""
    runs: dict[str, list[str]] = {}

    def losses(setup: str) -> list[str]:
        if setup not in runs:
            kernel = kernel_of_its_own(tmp_path_factory.mktemp("uninterrupted"))
            try:
                kernel.run(setup).ok()
                kernel.run(TRAIN).ok()
                runs[setup] = json.loads(kernel.run(LOSSES).ok().stdout)
            finally:
                kernel.close()
        return runs[setup]

    return losses


def test_sigterm_in_a_training_loop_checkpoints_at_a_safe_point_and_continues_exactly(
    start_kernel, jupyter_dirs, tmp_path, uninterrupted
):
    store, env = tmp_path / "store", {"JUPYTER_PAUSE_STORE": str(tmp_path / "store"), "JUPYTER_PAUSE_SESSION": "t"}
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    want = uninterrupted(SETUP)
    assert len(want) == STEPS

    a = start_kernel(tmp_path / "a", **env)
    a.run("%load_ext jupyter_pause\n" + SETUP + "pace = 0.1").ok()
    a.send(TRAIN)
    wait_for(marker_of(a, jupyter_dirs["JUPYTER_RUNTIME_DIR"]).exists, 60, "the loop's first safe point")
    assert terminate(a) == -signal.SIGTERM
    (taken,) = Catalog(Store(str(store))).checkpoints("t")
    assert taken.trigger == "sigterm" and not taken.mid_cell
    assert 0 < taken.loops[-1]["done"] < STEPS  # inside the loop, not after it

    b = start_kernel(tmp_path / "b", **env)
    assert "verdict: restored" in b.run("%load_ext jupyter_pause\n%resume").ok().stdout
    assert "captured mid-cell" not in b.run("%resume --check").ok().stdout
    b.run(TRAIN).ok()
    got = json.loads(b.run(LOSSES).ok().stdout)
    assert got == want  # the same number of steps, each loss bit-identical


def test_a_training_cell_edited_outside_its_loops_continues_where_the_checkpoint_left_it(
    start_kernel, jupyter_dirs, tmp_path, uninterrupted
):
    store, env = tmp_path / "store", {"JUPYTER_PAUSE_STORE": str(tmp_path / "store"), "JUPYTER_PAUSE_SESSION": "e"}
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    want = uninterrupted(SETUP)

    a = start_kernel(tmp_path / "a", **env)
    a.run("%load_ext jupyter_pause\n" + SETUP + "pace = 0.1").ok()
    a.send(TRAIN)
    wait_for(marker_of(a, jupyter_dirs["JUPYTER_RUNTIME_DIR"]).exists, 60, "the loop's first safe point")
    assert terminate(a) == -signal.SIGTERM
    (taken,) = Catalog(Store(str(store))).checkpoints("e")
    epoch = next(r for r in taken.loops if r["depth"] == 0)
    batch = next(r for r in taken.loops if r["depth"] == 1 and not r["finished"])

    b = start_kernel(tmp_path / "b", **env)
    assert "verdict: restored" in b.run("%load_ext jupyter_pause\n%resume").ok().stdout
    before = len(b.value("losses"))
    edited = (
        "print('training again')\n"
        + TRAIN.replace("time.sleep(pace)", "time.sleep(pace / 10)  # faster now")
        + "print('trained', len(losses))\n"
    )
    out = b.run(edited).ok().stdout
    where = f"epoch {epoch['done']}, step {batch['done']}"
    assert f"the cell changed outside its loops since the checkpoint: continuing at {where}" in out
    assert "starts from its first item" not in out
    got = json.loads(b.run(LOSSES).ok().stdout)
    assert 0 < before < STEPS and got == want  # only the remaining steps ran, each loss bit-identical


def test_sigterm_mid_cell_without_steps_is_marked_and_the_verdict_says_so(start_kernel, tmp_path):
    env = {"JUPYTER_PAUSE_STORE": str(tmp_path / "store"), "JUPYTER_PAUSE_SESSION": "mid"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start_kernel(tmp_path / "a", **env)
    a.run("%load_ext jupyter_pause\nimport time\nprogress = []").ok()
    a.send("open('running', 'w').close()\nwhile True:\n    progress.append(len(progress))\n    time.sleep(0.01)")
    wait_for((tmp_path / "a" / "running").exists, 60, "the cell's start")
    assert terminate(a) == -signal.SIGTERM
    (taken,) = Catalog(Store(env["JUPYTER_PAUSE_STORE"])).checkpoints("mid")
    assert taken.trigger == "sigterm" and taken.mid_cell

    b = start_kernel(tmp_path / "b", **env)
    out = b.run("%load_ext jupyter_pause\n%resume").ok().stdout
    assert "verdict: restored" in out and "the state was captured mid-cell" in out
    assert b.value("len(progress)") > 0


def test_sigterm_between_cells_is_not_marked_mid_cell(start_kernel, tmp_path):
    env = {"JUPYTER_PAUSE_STORE": str(tmp_path / "store"), "JUPYTER_PAUSE_SESSION": "idle"}
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", **env)
    a.run("%load_ext jupyter_pause\nx = 1").ok()
    assert terminate(a) == -signal.SIGTERM
    (taken,) = Catalog(Store(env["JUPYTER_PAUSE_STORE"])).checkpoints("idle")
    assert not taken.mid_cell


def test_a_step_longer_than_the_grace_budget_gets_a_mid_cell_checkpoint(start_kernel, jupyter_dirs, tmp_path):
    env = {
        "JUPYTER_PAUSE_STORE": str(tmp_path / "store"),
        "JUPYTER_PAUSE_SESSION": "slow",
        "JUPYTER_PAUSE_SIGTERM_GRACE": "1",
    }
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", **env)
    a.run("%load_ext jupyter_pause\nimport time\nimport jupyter_pause as jp").ok()
    a.send("for i in jp.steps(range(3)):\n    time.sleep(0 if i == 0 else 600)")
    wait_for(marker_of(a, jupyter_dirs["JUPYTER_RUNTIME_DIR"]).exists, 60, "the loop's first safe point")
    started = time.monotonic()
    assert terminate(a) == -signal.SIGTERM
    assert time.monotonic() - started < 30  # the budget (1 s), then the checkpoint; not the 600 s step
    (taken,) = Catalog(Store(env["JUPYTER_PAUSE_STORE"])).checkpoints("slow")
    assert taken.trigger == "sigterm" and taken.mid_cell


def test_the_demo_notebook_continues_exactly_after_an_interruption(start_kernel, jupyter_dirs, tmp_path):
    demo = Path(__file__).resolve().parents[2] / "notebooks" / "pause_in_loop.ipynb"
    setup, train, check = [c.source for c in nbformat.read(demo, as_version=4).cells if c.cell_type == "code"]
    assert "pace = 0.5" in setup
    env = {"JUPYTER_PAUSE_STORE": str(tmp_path / "store"), "JUPYTER_PAUSE_SESSION": "demo"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start_kernel(tmp_path / "a", **env)
    a.run("%load_ext jupyter_pause\n" + setup.replace("pace = 0.5", "pace = 0.02")).ok()
    a.send(train)
    wait_for(marker_of(a, jupyter_dirs["JUPYTER_RUNTIME_DIR"]).exists, 60, "the loop's first safe point")
    assert terminate(a) == -signal.SIGTERM
    b = start_kernel(tmp_path / "b", **env)
    assert "verdict: restored" in b.run("%load_ext jupyter_pause\n%resume").ok().stdout
    b.run(train).ok()
    assert "128 steps here, 128 without pausing; identical: True" in b.run(check).ok().stdout


def test_sigterm_during_periodic_checkpoints_at_safe_points_never_interleaves(start_kernel, tmp_path):
    env = {"JUPYTER_PAUSE_STORE": str(tmp_path / "store"), "JUPYTER_PAUSE_SESSION": "every"}
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", **env)
    a.run("%load_ext jupyter_pause\nimport jupyter_pause as jp\nimport numpy as np\nbig = np.zeros(4_000_000)").ok()
    # Nearly all of the cell's time is spent in periodic checkpoints, so SIGTERM lands in one.
    a.send("for i in jp.steps(range(100_000), every=1):\n    big[i % big.size] += 1")
    catalog = Catalog(Store(env["JUPYTER_PAUSE_STORE"]))
    wait_for(lambda: len(catalog.checkpoints("every")) >= 3, 60, "three periodic checkpoints")
    assert terminate(a) == -signal.SIGTERM
    taken = sorted(catalog.checkpoints("every"), key=lambda m: m.created)
    assert [m.trigger for m in taken][-1] == "sigterm" and not taken[-1].mid_cell
    assert {m.trigger for m in taken[:-1]} == {"periodic"}
    for before, after in zip(taken, taken[1:], strict=False):
        assert after.parent == before.id  # one after the other: none taken inside another


def test_a_steps_loop_checkpoints_on_sigterm_without_load_ext(start_kernel, jupyter_dirs, tmp_path):
    env = {"JUPYTER_PAUSE_STORE": str(tmp_path / "store"), "JUPYTER_PAUSE_SESSION": "plain"}
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", **env)
    a.run("import time\nimport jupyter_pause as jp\ndone = []").ok()
    a.send("for i in jp.steps(range(1000)):\n    done.append(i)\n    time.sleep(0.05)")
    wait_for(marker_of(a, jupyter_dirs["JUPYTER_RUNTIME_DIR"]).exists, 60, "the loop's first safe point")
    assert terminate(a) == -signal.SIGTERM
    (taken,) = Catalog(Store(env["JUPYTER_PAUSE_STORE"])).checkpoints("plain")
    assert taken.trigger == "sigterm" and not taken.mid_cell and taken.loops[-1]["done"] > 0


# -- a loader with worker processes: SIGTERM, SIGKILL, and a SIGTERM that follows a pause ---------


def _kernels(uninterrupted, tmp_path):
    """The environment of a test's kernels (its own store) and the losses their run must give."""
    env = {"JUPYTER_PAUSE_STORE": str(tmp_path / "store"), "JUPYTER_PAUSE_SESSION": "t"}
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    return env, uninterrupted(setup_with("workers"))


def _continues(start_kernel, tmp_path, env, want, cell: str = TRAIN) -> str:
    """Resume in a new kernel, run the training ``cell`` again; its output (the losses must be ``want``)."""
    b = start_kernel(tmp_path / "b", **env)
    resumed = b.run("%load_ext jupyter_pause\n%resume").ok().stdout
    assert "verdict: restored" in resumed, resumed
    out = b.run(cell).ok().stdout
    assert json.loads(b.run(LOSSES).ok().stdout) == want
    return resumed + out


def paused_mid_epoch(start_kernel, jupyter_dirs, tmp_path, env):
    """A kernel whose training cell (loader with workers) a pause request stopped at a safe point,
    as the server's Pause does, without the shutdown that follows it."""
    a = start_kernel(tmp_path / "a", **env)
    a.run("%load_ext jupyter_pause\n" + setup_with("workers") + "pace = 0.1").ok()
    msg = a.send(TRAIN)
    wait_for(marker_of(a, jupyter_dirs["JUPYTER_RUNTIME_DIR"]).exists, 60, "the loop's first safe point")
    channel.send_request(a.manager.provisioner.process, SafePointRequest("t", "button", requested=time.time()))
    stopped = a.collect(msg)
    assert stopped.ename == "CellPaused", stopped
    return a


def test_sigterm_mid_epoch_with_workers_continues_exactly(start_kernel, jupyter_dirs, tmp_path, uninterrupted):
    env, want = _kernels(uninterrupted, tmp_path)
    a = start_kernel(tmp_path / "a", **env)
    a.run("%load_ext jupyter_pause\n" + setup_with("workers") + "pace = 0.1").ok()
    a.send(TRAIN)
    wait_for(marker_of(a, jupyter_dirs["JUPYTER_RUNTIME_DIR"]).exists, 60, "the loop's first safe point")
    assert terminate(a) == -signal.SIGTERM
    (taken,) = Catalog(Store(env["JUPYTER_PAUSE_STORE"])).checkpoints("t")
    assert taken.trigger == "sigterm" and 0 < taken.loops[-1]["done"] < STEPS
    assert "continues where the checkpoint left it" in _continues(start_kernel, tmp_path, env, want)


def test_sigkill_between_periodic_checkpoints_with_workers_continues_exactly(start_kernel, tmp_path, uninterrupted):
    env, want = _kernels(uninterrupted, tmp_path)
    a = start_kernel(tmp_path / "a", **env)
    a.run(setup_with("workers") + "pace = 0.1").ok()
    periodic = TRAIN.replace("jp.steps(loader)", "jp.steps(loader, every=3)")
    a.send(periodic)
    catalog = Catalog(Store(env["JUPYTER_PAUSE_STORE"]))
    wait_for(lambda: len(catalog.checkpoints("t")) >= 2, 90, "two periodic checkpoints")
    a.kill()
    newest = catalog.checkpoints("t")[0]
    assert newest.trigger == "periodic" and 0 < newest.loops[-1]["done"] < STEPS
    _continues(start_kernel, tmp_path, env, want, periodic)


def test_a_sigterm_after_a_pause_takes_no_second_checkpoint_and_the_place_is_kept(
    start_kernel, jupyter_dirs, tmp_path, uninterrupted
):
    """The pause stops the cell at a safe point; the shutdown that follows escalates to SIGTERM:
    the pause's checkpoint stays the newest, and the run continues from it exactly."""
    env, want = _kernels(uninterrupted, tmp_path)
    a = paused_mid_epoch(start_kernel, jupyter_dirs, tmp_path, env)
    workers = psutil.Process(a.pid).children()  # asked from outside: a cell run here would end the pause
    assert workers == [], f"the loader's worker processes outlived the pause: {workers}"
    (paused,) = Catalog(Store(env["JUPYTER_PAUSE_STORE"])).checkpoints("t")
    assert terminate(a) == -signal.SIGTERM
    (still,) = Catalog(Store(env["JUPYTER_PAUSE_STORE"])).checkpoints("t")
    assert still.id == paused.id and paused.trigger == "button"
    _continues(start_kernel, tmp_path, env, want)


def test_a_checkpoint_taken_after_a_pause_before_the_rerun_keeps_the_loops_place(
    start_kernel, jupyter_dirs, tmp_path, uninterrupted
):
    """A cell that is not the paused one runs (no place is lost by it), then %checkpoint: the new
    checkpoint holds the paused loops' positions and says the re-run continues there."""
    env, want = _kernels(uninterrupted, tmp_path)
    a = paused_mid_epoch(start_kernel, jupyter_dirs, tmp_path, env)
    said = a.run("print(len(losses))\n%checkpoint").ok().stdout
    assert "loops held at" in said, said
    catalog = Catalog(Store(env["JUPYTER_PAUSE_STORE"]))
    newest, paused = catalog.checkpoints("t")
    assert newest.trigger == "manual" and newest.loops == paused.loops
    a.kill()
    assert "loops held at" in _continues(start_kernel, tmp_path, env, want)
