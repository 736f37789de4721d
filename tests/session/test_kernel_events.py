"""What a kernel writes to the ledger: checkpoint_committed at each commit, the run report's
resume moments, and its own start and stop only where no server of ours records them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import jupyter_pause as jp
from jupyter_pause import ledger
from jupyter_pause.ledger import checking
from jupyter_pause.session import kernel_events as kernel_ledger
from jupyter_pause.store.storage import Store
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")


def test_checkpoints_and_resumes_are_in_the_ledger(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("JUPYTERHUB_USER", "ada")
    ns = {"weights": bytes(200_000), "label": "kept"}
    first = jp.checkpoint(store=str(tmp_path), session="nb", namespace=ns, trigger="periodic")
    ns["label"] = "changed"
    second = jp.checkpoint(store=str(tmp_path), session="nb", namespace=ns, trigger="button")
    another_process()
    moments = {"kernel_stopped": 1.0e9, "resume_requested": 1.0e9 + 60, "resources_available": 1.0e9 + 61}
    cycle = jp.resume_and_verify(store=str(tmp_path), session="nb", namespace={}, moments=moments)
    events, malformed = ledger.read(Store(str(tmp_path)))
    assert malformed == 0
    commits = [e for e in events if e.event == "checkpoint_committed"]
    assert [(e.checkpoint, e.trigger) for e in commits] == [
        (first.manifest.id, "periodic"),
        (second.manifest.id, "button"),
    ]
    assert commits[0].bytes == commits[0].bytes_total >= 200_000  # all new
    assert commits[1].bytes < 10_000 and commits[1].bytes_total >= 200_000  # only the label changed
    assert all(e.user == "ada" and e.session == "nb" for e in events)
    resume = [(e.event, e.at) for e in events if e.event != "checkpoint_committed"]
    # the moments the run report has, not measured again; a resume in a running kernel has no kernel_ready
    assert resume == [
        ("resume_requested", 1.0e9 + 60),
        ("resources_available", 1.0e9 + 61),
        ("next_cell_run", cycle.report.moments["verified"]),
    ]
    assert events[-1].extra["verdict"] == "restored" and events[-1].checkpoint == second.manifest.id


def test_a_kernel_under_our_server_signs_its_checkpoint_and_resume_records(tmp_path, monkeypatch) -> None:
    """Under a server of ours the kernel never records its own start (so never set up signing
    there); its checkpoint and resume records are signed with its key all the same."""
    key = "k" * 40
    monkeypatch.setenv("JUPYTER_PAUSE_SIGNING_KEY", key)
    monkeypatch.setenv(kernel_ledger.SERVER_RECORDS, "1")
    monkeypatch.setattr(checking, "_signer", None)  # as in a new kernel; put back afterwards
    jp.checkpoint(store=str(tmp_path), session="nb", namespace={"x": 1}, trigger="release")
    another_process()
    moments = {"resume_requested": 1.0e9, "resources_available": 1.0e9 + 1, "kernel_ready": 1.0e9 + 2}
    jp.resume_and_verify(store=str(tmp_path), session="nb", namespace={}, moments=moments)
    events, _ = ledger.read(Store(str(tmp_path), keys=key))  # encrypted with the key: read with it
    kinds = ["checkpoint_committed", "resume_requested", "resources_available", "kernel_ready", "next_cell_run"]
    assert sorted(e.event for e in events) == sorted(kinds)
    assert {e.event: ledger.trust(e, key) for e in events} == dict.fromkeys(kinds, ledger.VERIFIED)


KERNEL = """
import sys, time
from IPython.core.interactiveshell import InteractiveShell
from jupyter_pause.config import PauseConfig
from jupyter_pause.session import kernel_events
shell = InteractiveShell.instance()
print(kernel_events.kernel_loaded(PauseConfig(store=sys.argv[1], node="laptop"), shell))
print(kernel_events.kernel_loaded(PauseConfig(store=sys.argv[1], node="laptop"), shell))
shell.run_cell("import time; time.sleep(0.3)")
shell.run_cell("x = 1")
"""


@pytest.mark.parametrize("under_our_server", [False, True])
def test_a_kernel_outside_our_server_records_its_own_start_and_stop(tmp_path, under_our_server) -> None:
    env = {"PATH": "/usr/bin:/bin", "JPY_SESSION_NAME": str(tmp_path / "alone.ipynb")}
    if under_our_server:
        env[kernel_ledger.SERVER_RECORDS] = "1"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KERNEL), str(tmp_path / "store")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    events, _ = ledger.read(Store(str(tmp_path / "store")))
    if under_our_server:
        assert done.stdout.split() == ["False", "False"] and events == []
        return
    assert done.stdout.split() == ["True", "False"]  # once per process
    assert [(e.event, e.session, e.node) for e in events] == [
        ("kernel_started", "alone", "laptop"),
        ("activity", "alone", "laptop"),
        ("kernel_stopped", "alone", "laptop"),
    ]
    first, second = events[1].spans
    assert first[1] - first[0] >= 0.3 and second[0] >= first[1]
