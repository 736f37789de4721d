"""The server's wait for a running cell before a pause, without kernels: a kernel whose process
answers the pause signal as a loop at its safe point would, and a probe answered once the cell ends
(and the real probe against a real kernel, under a Jupyter server)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from jupyter_pause.protocol import PauseReply, SafePointRequest, channel, parse_reply
from jupyter_pause.server import cellwait, kernelrun
from tests.support.kernels import OneKernel
from tests.support.metadata import until
from tests.support.server_helpers import open_kernel, run, write_notebook


@pytest.fixture(autouse=True)
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "runtime"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(folder))
    return folder


class FakeKernel:
    """A kernel as the server's kernel manager holds it. ``running``: a cell runs ahead of the
    pause; ``execution_state``: what the server has heard of it so far (it may still read "idle"
    while a cell runs). Its process answers the signal like a kernel at its next safe point would
    (when ``answers``)."""

    def __init__(self, running: bool = True, heard: bool = True, answers: bool = True) -> None:
        self.running = running
        self.execution_state = "busy" if running and heard else "idle"
        self.connection_file = "/run/jupyter/kernel-abc.json"
        self.provisioner = type("Provisioner", (), {})()
        self.provisioner.pid = 4242
        self.provisioner.process = self
        self.pid = 4242
        self.answers = answers
        self.signals: list[int] = []

    def send_signal(self, signum: int) -> None:
        self.signals.append(signum)
        if self.answers:
            request = channel.claim_request(self.pid)
            channel.write_reply(self.pid, PauseReply(f"ck-{request.trigger}"))

    def end_cell(self) -> None:
        self.running, self.execution_state = False, "idle"

    def is_alive(self) -> bool:
        return True


class FakeProbe:
    """The probe's contract: answered once no cell runs ahead of it; closed whatever happened."""

    def __init__(self, kernel: FakeKernel) -> None:
        self.kernel = kernel
        self.closed = False

    async def answered(self, within: float) -> bool:
        if self.kernel.running:
            await asyncio.sleep(min(within, 0.01))
        return not self.kernel.running

    def close(self) -> None:
        self.closed = True


def wait(
    kernel: FakeKernel, timeout: float = 5.0, ends_after: int | None = None
) -> tuple[str | None, list[str], FakeProbe]:
    """The wait's line, what it told, and its probe; the cell ends after ``ends_after`` tells."""
    manager = OneKernel(kernel)
    probe = FakeProbe(kernel)
    told: list[str] = []

    async def tell(detail: str) -> None:
        told.append(detail)
        if ends_after is not None and len(told) >= ends_after:
            kernel.end_cell()

    async def go() -> str | None:
        process = kernelrun.process_of(manager, "k")
        request = SafePointRequest("train", "button", requested=1.0)
        return await cellwait.wait_for_cell(manager, "k", timeout, process, request, tell, probe=probe)

    return asyncio.run(go()), told, probe


def test_an_idle_kernel_is_not_signalled_and_nothing_is_said():
    kernel = FakeKernel(running=False)
    line, told, probe = wait(kernel)
    assert (line, told, kernel.signals) == (None, [], [])
    assert probe.closed


def test_a_busy_cell_without_a_marker_is_waited_for_and_never_signalled():
    kernel = FakeKernel()
    line, told, probe = wait(kernel, ends_after=1)
    assert line is None and told == [cellwait.NO_SAFE_POINT] and kernel.signals == []
    assert probe.closed


def test_a_cell_the_server_still_reads_idle_is_waited_for_all_the_same():
    # the moment between a cell's start and the server hearing its "busy": the probe says it runs
    kernel = FakeKernel(heard=False)
    line, told, _ = wait(kernel, ends_after=1)
    assert line is None and told == [cellwait.NO_SAFE_POINT]


def test_a_loop_the_server_still_reads_idle_is_asked_to_pause_at_its_safe_point():
    kernel = FakeKernel(heard=False)
    channel.write_marker(channel.Marker(4242, "kernel-abc.json", 137, "step 137 of epoch 3", 1.0))
    line, told, _ = wait(kernel)
    assert parse_reply(line, PauseReply).checkpoint == "ck-button"
    assert kernel.signals == [signal.SIGUSR1] and told == ["checkpointing at a safe point"]


def test_a_loop_is_asked_to_pause_and_its_answer_returned():
    kernel = FakeKernel()
    channel.write_marker(channel.Marker(4242, "kernel-abc.json", 137, "step 137 of epoch 3", 1.0))
    line, told, probe = wait(kernel)
    assert parse_reply(line, PauseReply).checkpoint == "ck-button"
    assert told == ["checkpointing at a safe point"]  # this kernel took the request up at once
    assert kernel.signals == [signal.SIGUSR1] and probe.closed


def test_a_marker_of_another_kernel_gets_no_signal():
    kernel = FakeKernel()
    channel.write_marker(channel.Marker(4242, "kernel-other.json", 1, "step 1", 1.0))
    line, _, _ = wait(kernel, ends_after=1)
    assert line is None and kernel.signals == []


def test_no_safe_point_in_time_withdraws_the_request_and_fails():
    kernel = FakeKernel(answers=False)
    channel.write_marker(channel.Marker(4242, "kernel-abc.json", 1, "step 1", 1.0))
    with pytest.raises(kernelrun.KernelCodeError, match="its loop reached no safe point"):
        wait(kernel, timeout=0.5)
    assert channel.claim_request(4242) is None  # withdrawn: a later safe point will not act


def test_a_cell_without_safe_points_past_the_timeout_fails_and_says_try_again():
    kernel = FakeKernel(heard=False)
    with pytest.raises(kernelrun.KernelCodeError, match="busy for more than 0.3 s .*try again when the cell ends"):
        wait(kernel, timeout=0.3)
    assert kernel.signals == []


def test_a_cell_that_ends_before_its_safe_point_is_paused_the_usual_way():
    kernel = FakeKernel(answers=False)
    channel.write_marker(channel.Marker(4242, "kernel-abc.json", 1, "step 1", 1.0))
    line, told, _ = wait(kernel, ends_after=1)
    assert line is None and kernel.signals == [signal.SIGUSR1]
    assert told == ["waiting for the next safe point (step 1)"]
    assert channel.claim_request(4242) is None


def ended(kernel: FakeKernel, give_up, monkeypatch: pytest.MonkeyPatch, replaced: bool = False) -> tuple[bool, list]:
    """``cellwait.ended`` on ``kernel`` (its probe a ``FakeProbe``): what it returned, and the probes made."""
    probes: list[FakeProbe] = []

    def make(of: FakeKernel) -> FakeProbe:
        probes.append(FakeProbe(of))
        return probes[-1]

    monkeypatch.setattr(cellwait, "Probe", make)
    manager = OneKernel(kernel)
    process = kernelrun.process_of(manager, "k")
    if replaced:  # the kernel restarted: another process under the same id
        kernel.provisioner = type("Provisioner", (), {"pid": 4343})()
    return asyncio.run(cellwait.ended(manager, "k", process, "while its cell ran", 0.01, give_up)), probes


def test_the_end_of_the_cells_ahead_is_waited_for_until_the_caller_gives_up(monkeypatch):
    kernel = FakeKernel()
    looks: list[int] = []

    def give_up() -> bool:  # the cell ends at the third look
        looks.append(1)
        if len(looks) == 3:
            kernel.end_cell()
        return False

    assert ended(kernel, give_up, monkeypatch)[0] is True
    assert len(looks) == 3
    returned, probes = ended(FakeKernel(), lambda: True, monkeypatch)  # a notice came: the wait stops
    assert returned is False and [p.closed for p in probes] == [True]


def test_a_kernel_replaced_while_its_cell_was_waited_for_is_said_to_have_died(monkeypatch):
    with pytest.raises(kernelrun.KernelDied, match="while its cell ran"):
        ended(FakeKernel(), lambda: False, monkeypatch, replaced=True)


# -- the probe, against a real kernel ---------------------------------------------------------


@pytest.mark.integration
async def test_the_probe_is_answered_once_the_running_cell_ends_and_takes_no_reply_of_another_client(
    jp_fetch, jp_serverapp, jp_root_dir
):
    kernel_id = await open_kernel(jp_fetch, write_notebook(jp_root_dir, "probe.ipynb", "x = 1"))
    started, go = jp_root_dir / "started", jp_root_dir / "go"
    code = f"import os, time\nopen({str(started)!r}, 'w').close()\nwhile not os.path.exists({str(go)!r}):\n"
    cell = asyncio.ensure_future(run(jp_serverapp, kernel_id, code + "    time.sleep(0.05)\nprint('the cell ended')"))

    async def cell_started() -> bool:
        return started.exists()

    await until(cell_started, 60, "the cell's start")
    probe = cellwait.Probe(jp_serverapp.kernel_manager.get_kernel(kernel_id))
    try:
        assert not await probe.answered(0.5)  # the cell cannot end before ``go`` exists
        go.touch()
        assert await probe.answered(60)
    finally:
        probe.close()
    # the cell's own client (the server's too) still gets its reply: each client has its own session
    assert (await asyncio.wait_for(cell, 60)).strip() == "the cell ended"
