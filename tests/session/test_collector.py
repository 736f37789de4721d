"""Python's garbage collector held off while a resume reads and unpickles (``session.collector``),
on again for the user's own code a resume runs, and as it was once the resume is done."""

from __future__ import annotations

import gc
import threading

import pytest

import jupyter_pause as jp
from jupyter_pause.session import collector
from tests.support.processes import another_process

#: ``gc.isenabled()`` as seen from inside a resume: (where, enabled).
SEEN: list[tuple[str, bool]] = []


class Watched:
    """A value whose unpickling notes whether the collector was on."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __setstate__(self, state: dict) -> None:
        SEEN.append(("unpickling", gc.isenabled()))
        self.__dict__.update(state)


@jp.after_resume
def note_the_collector():
    SEEN.append(("after_resume hook", gc.isenabled()))


@pytest.fixture
def collector_on():
    """The collector on for the test, and as it was found after it (a test may turn it off)."""
    was = gc.isenabled()
    gc.enable()
    SEEN.clear()
    yield
    SEEN.clear()
    if was:
        gc.enable()
    else:
        gc.disable()


def test_paused_holds_the_collector_off_and_puts_it_back_as_it_was(collector_on):
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still holds it
    assert gc.isenabled()
    gc.disable()  # a user who turned it off keeps it off
    with collector.paused():
        with collector.running_user_code():
            assert not gc.isenabled()
    assert not gc.isenabled()


def test_user_code_inside_a_pause_runs_with_the_collector_on(collector_on):
    with collector.running_user_code():  # outside a pause: nothing changes
        assert gc.isenabled()
    with collector.paused():
        with collector.running_user_code():
            assert gc.isenabled()
        assert not gc.isenabled()
        with collector.running_user_code(when=False):  # nothing of the user's to run
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_pauses_on_two_threads_end_when_the_last_one_ends(collector_on):
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with collector.paused():
            entered.set()
            release.wait(30)

    worker = threading.Thread(target=other)
    worker.start()
    assert entered.wait(30)
    with collector.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread's resume is still running
    release.set()
    worker.join(30)
    assert gc.isenabled()


def test_a_resume_unpickles_with_the_collector_off_and_runs_hooks_with_it_on(tmp_path, collector_on, new_process):
    ns = {"watched": Watched(3), "note_the_collector": note_the_collector}
    jp.checkpoint(store=str(tmp_path), session="gc", namespace=ns)
    another_process()
    target: dict = {}
    cycle = jp.resume_and_verify(store=str(tmp_path), session="gc", namespace=target, write_report=False)
    assert cycle.verdict.kind == "restored" and target["watched"].n == 3
    unpickled = [on for where, on in SEEN if where == "unpickling"]
    assert unpickled and not any(unpickled)  # the resume's own unpickling, and the restore test's
    assert [x for x in SEEN if x[0] != "unpickling"] == [("after_resume hook", True)]
    assert gc.isenabled()
