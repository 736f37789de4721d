"""The pause request channel and the kernel's acts at safe points, without kernels: marker,
request and reply files, the signal, SIGTERM's deferral and the mid-cell mark (the server's side
of the wait is ``tests/server/test_cellwait.py``)."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jupyter_pause.config import ENV_VARS, PauseConfig
from jupyter_pause.errors import PauseError
from jupyter_pause.loops import safepoints
from jupyter_pause.loops.steps import SafePoint
from jupyter_pause.protocol import PauseReply, RemoteError, SafePointRequest, channel, parse_reply
from jupyter_pause.session import background, capture
from jupyter_pause.store.manifest import Manifest


@pytest.fixture(autouse=True)
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "runtime"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(folder))
    return folder


@pytest.fixture
def kernel_side(monkeypatch: pytest.MonkeyPatch) -> Any:
    """This process as a kernel running a loop: fresh state, a connection file, its SIGUSR1 back after."""
    monkeypatch.setattr(safepoints, "_state", safepoints._State())
    monkeypatch.setattr(safepoints, "_connection_file", lambda: "kernel-abc.json")
    monkeypatch.setattr(safepoints, "_install_sigterm", lambda: None)  # never in the test process
    timers: list[float] = []
    monkeypatch.setattr(safepoints.threading, "Timer", lambda grace, *a: FakeTimer(grace, timers))
    before = signal.getsignal(channel.SIGNAL)
    yield timers
    signal.signal(channel.SIGNAL, before)
    channel.remove_marker(os.getpid())


class FakeTimer:
    def __init__(self, grace: float, started: list[float]) -> None:
        self.grace, self.started, self.daemon = grace, started, False

    def start(self) -> None:
        self.started.append(self.grace)


@dataclass
class Taken:
    """What a checkpoint stand-in gives back (the fields ``_pause_here`` reads)."""

    manifest: Any
    skipped: list[Any] = field(default_factory=list)

    def summary(self) -> str:
        return f"checkpoint {self.manifest.id}"


def fake_checkpoint(monkeypatch: pytest.MonkeyPatch, fail: Exception | None = None) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def checkpoint(**kwargs: Any) -> Taken:
        calls.append(kwargs)
        if fail is not None:
            raise fail
        return Taken(manifest=type("M", (), {"id": f"ck{len(calls)}"})())

    monkeypatch.setattr("jupyter_pause.session.checkpoint.checkpoint", checkpoint)
    return calls


POINT = SafePoint(loop="cell-1:line-2:depth-1", step=137, description="step 137 of epoch 3", depth=1)


class SelfProcess:
    """This process, as the server sees a kernel's process."""

    pid = os.getpid()

    def send_signal(self, signum: int) -> None:
        os.kill(self.pid, signum)


# -- the channel -----------------------------------------------------------------------------


def test_a_marker_is_read_only_for_the_kernel_that_wrote_it():
    channel.write_marker(channel.Marker(4242, "kernel-abc.json", 3, "step 3", 1.0))
    assert channel.read_marker(4242, "/run/jupyter/kernel-abc.json").description == "step 3"
    assert channel.read_marker(4242, "/run/jupyter/kernel-other.json") is None  # the pid was reused
    assert channel.read_marker(4242, "") is None
    assert channel.read_marker(4243, "kernel-abc.json") is None
    channel.remove_marker(4242)
    assert channel.read_marker(4242, "kernel-abc.json") is None


def test_files_of_kernels_that_are_gone_are_swept_and_the_living_keep_theirs(runtime):
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process has now (as a SIGKILLed kernel's)
    channel.write_marker(channel.Marker(gone.pid, "kernel-gone.json", 7, "step 7", 1.0))
    channel.write_reply(gone.pid, PauseReply("ck"))
    channel.write_marker(channel.Marker(os.getpid(), "kernel-me.json", 1, "step 1", 1.0))
    (runtime / "kernel-me.json").write_text("{}")  # not ours to touch
    removed = channel.sweep()
    assert sorted(p.name for p in removed) == sorted(
        [channel.marker_path(gone.pid).name, channel.reply_path(gone.pid).name]
    )
    assert channel.read_marker(os.getpid(), "kernel-me.json") is not None
    assert (runtime / "kernel-me.json").exists()
    channel.remove_marker(os.getpid())


def test_a_request_is_claimed_once_and_then_cannot_be_withdrawn():
    sent: list[int] = []
    process = type("P", (), {"pid": 4242, "send_signal": lambda self, s: sent.append(s)})()
    channel.send_request(process, SafePointRequest("s", "button", requested=1.0))
    assert sent == [signal.SIGUSR1]  # to that process alone (its children never get it)
    assert channel.claim_request(4242) == SafePointRequest("s", "button", requested=1.0)
    assert channel.claim_request(4242) is None
    assert channel.withdraw_request(4242) is False  # the kernel owns it: its answer is due
    channel.write_reply(4242, PauseReply("ck"))
    assert parse_reply(channel.take_reply(4242), PauseReply) == PauseReply("ck")
    assert channel.take_reply(4242) is None


def test_a_withdrawn_request_is_not_acted_on():
    process = type("P", (), {"pid": 4242, "send_signal": lambda self, s: None})()
    channel.send_request(process, SafePointRequest("s", "button", requested=1.0))
    assert channel.withdraw_request(4242) is True
    assert channel.claim_request(4242) is None


def test_a_request_file_of_the_wrong_shape_is_not_acted_on():
    channel.request_path(4242).parent.mkdir(parents=True, exist_ok=True)
    channel.request_path(4242).write_text('{"session": 5, "trigger": "button", "requested": 1.0}')
    assert channel.claim_request(4242) is None
    assert not channel.request_path(4242).exists()  # claimed, so no one acts on it later


# -- the kernel at safe points ---------------------------------------------------------------


def test_a_safe_point_declares_the_handler_and_where_the_loop_is(kernel_side):
    safepoints._at_safe_point(POINT)
    assert signal.getsignal(channel.SIGNAL) is safepoints._on_signal
    marker = channel.read_marker(os.getpid(), "kernel-abc.json")
    assert marker is not None and marker.step == 137 and marker.description == "step 137 of epoch 3"
    safepoints._cell_ended()
    assert channel.read_marker(os.getpid(), "kernel-abc.json") is None and not safepoints.in_loop()


def test_a_kernel_loop_installs_the_sigterm_checkpoint_once(kernel_side, monkeypatch):
    installed: list[bool] = []
    monkeypatch.setattr(safepoints, "_install_sigterm", lambda: installed.append(True))
    safepoints._at_safe_point(POINT)
    safepoints._at_safe_point(POINT)
    assert installed == [True]


def test_outside_a_kernel_a_loop_installs_nothing(kernel_side, monkeypatch):
    installed: list[bool] = []
    monkeypatch.setattr(safepoints, "_install_sigterm", lambda: installed.append(True))
    monkeypatch.setattr(safepoints, "_connection_file", lambda: "")
    safepoints._at_safe_point(POINT)
    assert installed == [] and signal.getsignal(channel.SIGNAL) is not safepoints._on_signal
    assert channel.read_marker(os.getpid(), "") is None


def test_a_signal_handler_of_the_users_is_left_alone_and_nothing_is_declared(kernel_side):
    mine = signal.signal(channel.SIGNAL, lambda *a: None)
    safepoints._at_safe_point(POINT)
    assert signal.getsignal(channel.SIGNAL) is not safepoints._on_signal
    assert channel.read_marker(os.getpid(), "kernel-abc.json") is None
    signal.signal(channel.SIGNAL, mine)


def test_a_request_checkpoints_at_the_next_safe_point_answers_and_stops_the_cell(kernel_side, monkeypatch):
    calls = fake_checkpoint(monkeypatch)
    safepoints._at_safe_point(POINT)
    channel.send_request(SelfProcess(), SafePointRequest("train", "button", requested=1.0))
    assert safepoints._state.requested
    with pytest.raises(safepoints.CellPaused) as stopped:
        try:
            safepoints._at_safe_point(POINT)
        except Exception:  # a user's loop catching errors does not swallow the pause
            pytest.fail("CellPaused was caught by except Exception")
    assert calls == [{"session": "train", "trigger": "button"}]
    assert str(stopped.value) == (
        "paused at step 137 of epoch 3 (checkpoint ck1); resume, then run this cell again to continue"
    )
    assert stopped.value._render_traceback_() == [f"CellPaused: {stopped.value}"]
    reply = parse_reply(channel.take_reply(os.getpid()), PauseReply)
    assert reply.checkpoint == "ck1"
    assert channel.read_marker(os.getpid(), "kernel-abc.json") is None


def test_a_failed_checkpoint_is_answered_and_the_loop_goes_on(kernel_side, monkeypatch):
    fake_checkpoint(monkeypatch, fail=PauseError("store unreachable"))
    safepoints._at_safe_point(POINT)
    channel.send_request(SelfProcess(), SafePointRequest("train", "button", requested=1.0))
    safepoints._at_safe_point(POINT)  # no CellPaused: the cell keeps running
    with pytest.raises(RemoteError, match="store unreachable"):
        parse_reply(channel.take_reply(os.getpid()), PauseReply)


def test_a_signal_without_a_request_does_nothing(kernel_side, monkeypatch):
    calls = fake_checkpoint(monkeypatch)
    safepoints._at_safe_point(POINT)
    os.kill(os.getpid(), channel.SIGNAL)
    safepoints._at_safe_point(POINT)
    assert calls == [] and not safepoints._state.requested


# -- SIGTERM ---------------------------------------------------------------------------------


def test_sigterm_without_a_loop_acts_at_once(kernel_side):
    assert safepoints.defer_sigterm(lambda: None, grace=10) is False
    assert kernel_side == []


def test_sigterm_in_a_loop_acts_at_the_next_safe_point_within_the_budget(kernel_side):
    acted: list[str] = []
    safepoints._at_safe_point(POINT)
    assert safepoints.defer_sigterm(lambda: acted.append("at safe point"), grace=10) is True
    assert kernel_side == [10]  # the timer that brings SIGTERM back when the budget runs out
    assert safepoints.defer_sigterm(lambda: acted.append("again"), grace=10) is True  # absorbed
    safepoints._at_safe_point(POINT)
    assert acted == ["at safe point"]


def test_sigterm_past_the_budget_acts_at_once(kernel_side, monkeypatch):
    safepoints._at_safe_point(POINT)
    assert safepoints.defer_sigterm(lambda: None, grace=10) is True
    monkeypatch.setattr(safepoints._state, "sigterm_deadline", 0.0)
    assert safepoints.defer_sigterm(lambda: None, grace=10) is False


def test_sigterm_when_the_cell_ends_before_a_safe_point_acts_then(kernel_side):
    acted: list[bool] = []
    safepoints._at_safe_point(POINT)
    safepoints.defer_sigterm(lambda: acted.append(True), grace=10)
    safepoints._cell_ended()
    assert acted == [True]


def test_sigterm_during_a_checkpoint_waits_for_it(kernel_side):
    with background.one_at_a_time:
        assert safepoints.defer_sigterm(lambda: None, grace=10) is True


def test_zero_grace_never_waits(kernel_side):
    safepoints._at_safe_point(POINT)
    assert safepoints.defer_sigterm(lambda: None, grace=0) is False


def test_mid_cell_is_marked_only_inside_its_block():
    assert not capture.mid_cell()
    with capture.capturing_mid_cell():
        assert capture.mid_cell()
        with capture.capturing_mid_cell(False):
            assert not capture.mid_cell()
    assert not capture.mid_cell()


# -- manifest and configuration --------------------------------------------------------------


def test_mid_cell_is_kept_in_the_manifest_and_absent_means_not():
    manifest = Manifest(id="a", session="s", lineage="l", parent=None, created=1.0, trigger="sigterm", node="n")
    assert Manifest.from_bytes(manifest.to_bytes()).mid_cell is False
    manifest.mid_cell = True
    assert Manifest.from_bytes(manifest.to_bytes()).mid_cell is True


def test_sigterm_grace_from_the_environment(monkeypatch):
    monkeypatch.setenv(ENV_VARS["sigterm_grace"], "45")
    assert PauseConfig().sigterm_grace == 45.0
    monkeypatch.setenv(ENV_VARS["sigterm_grace"], "soon")
    with pytest.raises(PauseError, match="JUPYTER_PAUSE_SIGTERM_GRACE must be a number of seconds"):
        PauseConfig()
