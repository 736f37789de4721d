"""jupyter_pause.protocol.nodestate: the record a server writes for its kernels is read back as it was
written, and is no record at all (never an exception) when its server is gone, it is another
server's, or the file is not a record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from jupyter_pause.protocol import channel, nodestate
from jupyter_pause.protocol.nodestate import SERVER_PID, FitRecord, NodeState, WatcherRecord, read, record_path, write

BLIND = NodeState(
    os.getpid(),
    (
        WatcherRecord("aws", "blind", "http://127.0.0.1:9/latest/meta-data/spot/instance-action answered HTTP 401"),
        WatcherRecord("gce", "watching"),
    ),
    FitRecord(False, "your last checkpoint took 95 s; a GCE notice gives 30 s: a pause would not finish in time"),
)


@pytest.fixture
def server_here(jp_environ: None, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process is the kernel's server (its pid in ``SERVER_PID``); the record's path, in the
    test's runtime folder."""
    monkeypatch.setenv(SERVER_PID, str(os.getpid()))
    return record_path(os.getpid())


def test_a_kernel_reads_what_its_server_wrote(server_here: Path, jp_runtime_dir: Path) -> None:
    assert read() is None  # nothing written yet
    write(BLIND, server_here)
    assert server_here.parent == jp_runtime_dir
    assert read() == BLIND
    calm = NodeState(os.getpid(), (WatcherRecord("", "searching", "aws: no answer"),))
    write(calm, server_here)
    assert read() == calm
    assert [p.name for p in jp_runtime_dir.iterdir()] == [server_here.name]  # replaced whole, nothing left over
    nodestate.remove(server_here)
    nodestate.remove(server_here)  # stopping twice is no error
    assert read() is None


def test_a_record_of_a_server_that_is_gone_is_ignored_and_swept(server_here: Path, monkeypatch) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process has now (a server that was SIGKILLed)
    monkeypatch.setenv(SERVER_PID, str(gone.pid))
    write(replace(BLIND, pid=gone.pid), record_path(gone.pid))
    assert read() is None
    assert read(gone.pid) is None
    write(BLIND, server_here)  # the living server's record stays
    assert channel.sweep() == [record_path(gone.pid)]
    assert read(os.getpid()) == BLIND


def test_another_servers_record_under_this_name_is_ignored(server_here: Path) -> None:
    write(replace(BLIND, pid=1), server_here)  # pid 1 runs, but this is not its record
    assert read() is None


def test_without_a_server_there_is_no_record(jp_environ: None, monkeypatch: pytest.MonkeyPatch) -> None:
    write(BLIND, record_path(os.getpid()))
    monkeypatch.delenv(SERVER_PID, raising=False)
    assert read() is None  # a kernel no jupyter-pause server started
    for value in ("", "abc", "-1", "0"):
        monkeypatch.setenv(SERVER_PID, value)
        assert read() is None


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{",
        b"\xff\xfe not text",
        b"[]",
        b"null",
        b'{"watchers": []}',
        b'{"pid": "%d"}',
        b'{"pid": true}',
        b'{"pid": %d, "watchers": {"cloud": "aws"}}',
        b'{"pid": %d, "watchers": ["aws"]}',
        b'{"pid": %d, "watchers": [{"cloud": "aws"}]}',
        b'{"pid": %d, "watchers": [{"cloud": "aws", "state": 3}]}',
        b'{"pid": %d, "fit": "too slow"}',
        b'{"pid": %d, "fit": {"fits": "no", "advice": "checkpoint more often"}}',
    ],
)
def test_a_file_that_is_not_a_record_is_no_record(server_here: Path, content: bytes) -> None:
    server_here.parent.mkdir(parents=True, exist_ok=True)
    server_here.write_bytes(content.replace(b"%d", str(os.getpid()).encode()))
    assert read() is None


def test_what_a_newer_server_adds_is_ignored(server_here: Path) -> None:
    data = BLIND.data() | {"since": 12.5}
    data["watchers"][0]["polls"] = 7
    server_here.parent.mkdir(parents=True, exist_ok=True)
    server_here.write_text(json.dumps(data))
    assert read() == BLIND
