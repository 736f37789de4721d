"""``@before_checkpoint`` and ``@after_resume`` (``session.hooks``): called in the namespace's
order at every checkpoint and resume, saved with the checkpoint and called again by a resume in a
new kernel; a hook that fails or runs too long is named and never stops the checkpoint; under
SIGTERM, periodic and in-loop checkpoints the hooks run within a time limit."""

from __future__ import annotations

import functools
import os
import signal
import threading
import time

import pytest

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.errors import PauseError
from jupyter_pause.session import hooks
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store
from tests.support.processes import another_process

#: What the hooks below did, in order (they are module functions: a resume brings back these very ones).
CALLS: list[str] = []


@jp.before_checkpoint
def second():
    CALLS.append("second")


@jp.before_checkpoint
def first():
    CALLS.append("first")


@jp.after_resume
def reconnect():
    CALLS.append("reconnect")


@jp.before_checkpoint
@jp.after_resume
def both():
    CALLS.append("both")


def plain():
    CALLS.append("plain")


@jp.before_checkpoint
def broken():
    raise ValueError("the writer is closed")


@jp.after_resume
def unreachable():
    raise ConnectionError("no database here")


@pytest.fixture
def calls():
    CALLS.clear()
    yield CALLS
    CALLS.clear()


def test_hooks_run_in_the_namespaces_order_before_each_checkpoint_and_after_each_resume(calls, tmp_path, new_process):
    ns = {"zeta": second, "alpha": first, "reconnect": reconnect, "both": both, "plain": plain, "x": 1}
    taken = jp.checkpoint(store=str(tmp_path), session="h", namespace=ns)
    assert calls == ["second", "first", "both"]  # the order they are in the namespace; plain never
    assert "before_checkpoint hook" not in taken.summary()
    calls.clear()
    another_process()
    result = jp.resume(store=str(tmp_path), session="h", namespace={})
    assert calls == ["reconnect", "both"]  # the restored after_resume hooks, in their order
    assert "after_resume hook" not in result.summary()


def test_a_failing_hook_is_named_and_the_checkpoint_and_resume_go_on(calls, tmp_path, new_process):
    ns = {"broken": broken, "first": first, "unreachable": unreachable, "x": 41}
    taken = jp.checkpoint(store=str(tmp_path), session="f", namespace=ns)
    assert "before_checkpoint hook 'broken' failed: ValueError: the writer is closed" in taken.summary()
    assert calls == ["first"] and "x" in {v.name for v in taken.manifest.variables}
    another_process()
    back: dict = {}
    result = jp.resume(store=str(tmp_path), session="f", namespace=back)
    assert back["x"] == 41 and result.complete
    assert "after_resume hook 'unreachable' failed: ConnectionError: no database here" in result.summary()


def slow_and_after(seconds: float, calls: list[str]) -> dict:
    @jp.before_checkpoint
    def slow():
        calls.append("slow started")
        time.sleep(seconds)
        calls.append("slow finished")

    @jp.before_checkpoint
    def later():
        calls.append("later")

    return {"slow": slow, "later": later}


@pytest.mark.parametrize("trigger", ["periodic", "sigterm", "button in a loop"])
def test_hooks_run_within_the_time_limit_under_sigterm_and_in_loops(trigger, tmp_path, new_process):
    calls: list[str] = []
    config = PauseConfig(store=str(tmp_path), session="t", hook_time_limit=0.5)
    started = time.monotonic()
    if trigger == "button in a loop":
        with hooks.in_loop():
            taken = jp.checkpoint(namespace=slow_and_after(60, calls), config=config, trigger="button")
    else:
        taken = jp.checkpoint(namespace=slow_and_after(60, calls), config=config, trigger=trigger)
    assert time.monotonic() - started < 20
    assert calls == ["slow started"]  # stopped at the limit; the next one not run
    summary = taken.summary()
    assert "before_checkpoint hook 'slow' was stopped at the hooks' time limit (0.5 s)" in summary
    assert "before_checkpoint hook 'later' was not run: the hooks' time limit (0.5 s) was spent" in summary


def test_a_manual_checkpoint_waits_for_its_hooks(tmp_path, new_process):
    calls: list[str] = []
    config = PauseConfig(store=str(tmp_path), session="m", hook_time_limit=0.1)
    taken = jp.checkpoint(namespace=slow_and_after(0.3, calls), config=config)
    assert calls == ["slow started", "slow finished", "later"] and "before_checkpoint hook" not in taken.summary()


def test_off_the_main_thread_a_slow_hook_is_left_running_and_not_waited_for(tmp_path, new_process):
    calls: list[str] = []
    config = PauseConfig(store=str(tmp_path), session="o", hook_time_limit=0.3)
    out = {}

    def take():
        out["taken"] = jp.checkpoint(namespace=slow_and_after(3, calls), config=config, trigger="periodic")

    worker = threading.Thread(target=take)
    worker.start()
    worker.join(20)
    assert "taken" in out and calls == ["slow started"]
    assert "before_checkpoint hook 'slow' was still running at the hooks' time limit (0.3 s)" in out["taken"].summary()


def test_a_timer_of_the_users_goes_on_after_limited_hooks(tmp_path, new_process):
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.5)
        config = PauseConfig(store=str(tmp_path), session="u", hook_time_limit=5)
        jp.checkpoint(namespace=slow_and_after(0.01, []), config=config, trigger="periodic")
        deadline = time.monotonic() + 10
        while not fired and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fired == [signal.SIGALRM]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_hook_that_checkpoints_runs_no_hooks_again(tmp_path, new_process):
    calls: list[str] = []

    @jp.before_checkpoint
    def nested():
        calls.append("nested")
        jp.checkpoint(store=str(tmp_path), session="n", namespace={"y": 2})

    jp.checkpoint(store=str(tmp_path), session="n", namespace={"nested": nested})
    assert calls == ["nested"]
    assert len(Catalog(Store(str(tmp_path))).checkpoints("n")) == 2


@pytest.mark.parametrize("thing", [print, 3, "flush", functools.partial(print, 1)])
def test_a_hook_decorator_on_what_is_no_def_function_says_so(thing):
    with pytest.raises(PauseError, match="marks a function defined with def"):
        jp.before_checkpoint(thing)


# -- real kernels ----------------------------------------------------------------------------

HOOKS = """
import json, time
import jupyter_pause as jp
calls = []

@jp.before_checkpoint
def flush():
    calls.append("flush")
    with open("hooks.log", "a") as log:
        log.write("flush\\n")

@jp.after_resume
def reconnect():
    global connected
    connected = "again"
    with open("hooks.log", "a") as log:
        log.write("reconnect\\n")
"""


@pytest.mark.integration
def test_hooks_saved_with_the_checkpoint_run_again_in_a_new_kernel(start_kernel, tmp_path):
    env = {"JUPYTER_PAUSE_STORE": str(tmp_path / "store"), "JUPYTER_PAUSE_SESSION": "k"}
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    a = start_kernel(tmp_path / "a", **env)
    a.run("%load_ext jupyter_pause\n" + HOOKS).ok()
    a.run("%checkpoint").ok()
    assert (tmp_path / "a" / "hooks.log").read_text() == "flush\n"
    a.run("for i in jp.steps(range(4), every=2):\n    pass").ok()  # two periodic checkpoints in the loop
    a.run("from jupyter_pause.session import background\nbackground.wait_for_background()").ok()
    assert (tmp_path / "a" / "hooks.log").read_text() == "flush\n" * 3
    a.kill()

    b = start_kernel(tmp_path / "b", **env)
    assert "verdict: restored" in b.run("%load_ext jupyter_pause\n%resume").ok().stdout
    assert b.value("connected") == "again" and b.value("calls") == ["flush"] * 3
    assert (tmp_path / "b" / "hooks.log").read_text() == "reconnect\n"
    b.run("%checkpoint").ok()  # the restored hook runs before the next checkpoint too
    assert (tmp_path / "b" / "hooks.log").read_text() == "reconnect\nflush\n"


SLOW_HOOKS = """
import time
import jupyter_pause as jp
state = list(range(5))

@jp.before_checkpoint
def fast():
    open("fast", "w").close()

@jp.before_checkpoint
def stuck():
    open("stuck started", "w").close()
    time.sleep(600)
    open("stuck finished", "w").close()

@jp.before_checkpoint
def last():
    open("last", "w").close()
"""


@pytest.mark.integration
def test_under_sigterm_a_stuck_hook_is_stopped_at_the_time_limit_and_the_checkpoint_is_taken(start_kernel, tmp_path):
    env = {
        "JUPYTER_PAUSE_STORE": str(tmp_path / "store"),
        "JUPYTER_PAUSE_SESSION": "s",
        "JUPYTER_PAUSE_HOOK_TIME_LIMIT": "2",
    }
    here = tmp_path / "a"
    here.mkdir()
    a = start_kernel(here, **env)
    a.run("%load_ext jupyter_pause\n" + SLOW_HOOKS).ok()
    process = a.manager.provisioner.process
    started = time.monotonic()
    os.kill(a.pid, signal.SIGTERM)
    assert process.wait(timeout=60) == -signal.SIGTERM
    took = time.monotonic() - started
    a.close()
    (taken,) = Catalog(Store(env["JUPYTER_PAUSE_STORE"])).checkpoints("s")
    assert taken.trigger == "sigterm" and "state" in {v.name for v in taken.variables}
    assert (here / "fast").exists() and (here / "stuck started").exists()
    assert not (here / "stuck finished").exists() and not (here / "last").exists()
    assert took < 30, f"the SIGTERM checkpoint took {took:.1f} s with a 2 s limit on its hooks"
