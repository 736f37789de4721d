"""The kernel's side of the server's calls: the line the server builds runs the entry point of its
request in this process and prints exactly one reply line; a real kernel answers with typed replies."""

from __future__ import annotations

import importlib
import json
import re

import pytest

from jupyter_pause.kernel import remote
from jupyter_pause.protocol import (
    PROTOCOL,
    ErrorReply,
    PauseReply,
    PauseRequest,
    RemoteError,
    Request,
    ResumeReply,
    ResumeRequest,
    SafePointRequest,
    call_source,
    parse_reply,
)
from jupyter_pause.protocol.wire import KERNEL_MODULE
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store
from tests.support.hostile import HOSTILE


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line]


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[Request]:
    """Have the pause entry point record its request and answer without checkpointing."""
    seen: list[Request] = []

    def record(request: PauseRequest) -> PauseReply:
        seen.append(request)
        return PauseReply(checkpoint="20260101-120000-a1b2c3", summary=request.session)

    monkeypatch.setitem(remote.ENTRIES, PauseRequest, record)
    return seen


def test_the_line_the_server_builds_imports_this_module():
    module = importlib.import_module(KERNEL_MODULE)
    assert module is remote and callable(module.call)


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_arrive_as_the_same_string(value, monkeypatch, capsys):
    seen = _recording(monkeypatch)
    namespace: dict = {}
    exec(compile(call_source(PauseRequest(value, value)), "<cell>", "exec"), namespace)
    assert set(namespace) == {"__builtins__"}, "the line bound a name in the user's namespace"
    assert seen == [PauseRequest(value, value)]
    (line,) = _lines(capsys.readouterr().out)
    assert parse_reply(line, PauseReply).summary == value


def test_entry_points_dispatch_on_the_request_type(monkeypatch):
    seen = _recording(monkeypatch)
    request = SafePointRequest("train", "spot", requested=1.0)
    assert remote.reply_to(request) == PauseReply("20260101-120000-a1b2c3", "train")
    assert seen == [request]
    assert remote.reply_to(Request()) == ErrorReply("?", "PauseError", "no kernel entry point runs a Request")


def test_a_failing_entry_prints_one_error_reply(capsys):
    remote.pause(session="no spaces allowed")
    (line,) = _lines(capsys.readouterr().out)
    with pytest.raises(RemoteError, match="invalid session name") as info:
        parse_reply(line, PauseReply)
    assert info.value.error == "PauseError"


def test_a_failing_resume_says_why(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JUPYTER_PAUSE_STORE", str(tmp_path / "store"))
    remote.resume("20260101-120000-a1b2c3", "nothing-here", moments={"kernel_ready": 1.0})
    (line,) = _lines(capsys.readouterr().out)
    with pytest.raises(RemoteError, match="nothing-here") as info:
        parse_reply(line, ResumeReply)
    assert info.value.error == "CheckpointNotFound"


def test_a_kernel_of_another_version_says_to_align_versions(capsys):
    remote.call(json.dumps({"protocol": 99, "entry": "pause", "args": {}}))
    remote.call(json.dumps({"protocol": PROTOCOL, "entry": "reboot", "args": {}}))
    remote.call(json.dumps({"protocol": PROTOCOL, "entry": "pause", "args": {"session": 5}}))
    first, second, third = _lines(capsys.readouterr().out)
    with pytest.raises(RemoteError, match="server speaks protocol 99 .* install the same jupyter-pause version"):
        parse_reply(first, PauseReply)
    with pytest.raises(RemoteError, match="no entry point 'reboot' \\(it has pause, resume, hold\\)"):
        parse_reply(second, PauseReply)
    with pytest.raises(RemoteError, match="has session=5, not a str: install the same") as info:
        parse_reply(third, PauseReply)
    assert info.value.error == "PauseError"


# -- a real kernel -------------------------------------------------------------------------------

HISTORY = re.compile(r"_+|_i+\d*|_\d+")


@pytest.mark.integration
def test_real_pause_and_resume_answer_with_typed_replies(start_kernel, tmp_path):
    store = tmp_path / "store"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store))
    a.run("answer = 41\nnote = 'it\\'s \"quoted\"\\n'").ok()
    before = set(a.value("sorted(globals())"))

    out = a.run(call_source(PauseRequest("remote-test", "button"))).ok().stdout
    paused = parse_reply(out, PauseReply)
    assert len(_lines(out)) == 1, out
    assert "checkpoint " + paused.checkpoint in paused.summary and paused.skipped == []
    (manifest,) = Catalog(Store(str(store))).checkpoints("remote-test")
    assert manifest.id == paused.checkpoint and manifest.trigger == "button"
    assert {"answer", "note"} <= {v.name for v in manifest.variables}
    added = set(a.value("sorted(globals())")) - before
    assert all(HISTORY.fullmatch(name) for name in added), f"the call left {added} in the namespace"

    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store))
    moments = {"kernel_stopped": 1.0, "kernel_ready": 2.5}
    source = call_source(ResumeRequest(paused.checkpoint, "remote-test", "cpu", moments))
    resumed = parse_reply(b.run(source).ok().stdout, ResumeReply)
    assert resumed.checkpoint == paused.checkpoint and resumed.verdict == "restored", resumed
    assert "restored 2 variable(s)" in resumed.summary
    assert b.value("[answer, note]") == [41, 'it\'s "quoted"\n']


@pytest.mark.integration
def test_a_hostile_session_reaches_a_real_kernel_as_data(start_kernel, tmp_path):
    marker = tmp_path / "pwned"
    session = f"x', trigger='button'); open({str(marker)!r}, 'w').write('1'); ('"
    k = start_kernel(tmp_path, JUPYTER_PAUSE_STORE=str(tmp_path / "store"))
    out = k.run(call_source(PauseRequest(session))).ok().stdout
    with pytest.raises(RemoteError, match="invalid session name") as info:
        parse_reply(out, PauseReply)
    assert info.value.error == "PauseError"
    assert not marker.exists()
