"""The server-kernel protocol: values travel as data, replies are found among noise and typed."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys

import pytest

from jupyter_pause.errors import PauseError
from jupyter_pause.kernel import remote
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store

HOSTILE = [
    "plain",
    "it's",
    'say "hi"',
    "'''",
    '"""',
    "line\nbreak\r\nand\rreturn",
    "back\\slash\\",
    "\\'",
    "x'); import os; os.system('echo pwned'); ('",
    "{session!r} {0} %s",
    "données/ノート 📓.ipynb",
    "lone \udc80 surrogate",
    "nul \x00 and \u2028 separator",
]


def _run_source(source: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Execute a built line in this process with ``pause`` recording its arguments."""
    seen: dict = {}

    def record(session: str, trigger: str = "button") -> remote.PauseReply:
        seen.update(session=session, trigger=trigger)
        return remote.PauseReply(checkpoint="20260101-120000-a1b2c3", summary=session)

    monkeypatch.setitem(remote.ENTRIES, "pause", record)
    namespace: dict = {}
    exec(compile(source, "<cell>", "exec"), namespace)
    assert set(namespace) == {"__builtins__"}, "the line bound a name in the user's namespace"
    return seen


# -- call_source ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_arrive_as_the_same_string_and_never_as_code(value, monkeypatch, capsys):
    source = remote.call_source("pause", session=value, trigger=value)
    tree = ast.parse(source)
    (statement,) = tree.body
    call = statement.value
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "call"
    (argument,) = call.args
    assert isinstance(argument, ast.Constant) and isinstance(argument.value, str)
    # Every name the line uses is the import; nothing from the value became code.
    assert {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} == {"__import__"}
    assert "\n" not in source and source.isascii()

    assert _run_source(source, monkeypatch) == {"session": value, "trigger": value}
    reply = remote.parse_reply(capsys.readouterr().out, remote.PauseReply)
    assert reply.summary == value


def test_call_source_refuses_unknown_entries_and_arguments():
    with pytest.raises(PauseError, match="no kernel entry point 'shutdown'; there are pause, resume"):
        remote.call_source("shutdown")
    with pytest.raises(PauseError, match=r"cannot call pause in the kernel with \['sesion'\]"):
        remote.call_source("pause", sesion="a")
    with pytest.raises(PauseError, match="cannot call resume"):
        remote.call_source("resume", checkpoint="c", session="s", moments={"t": float("nan")})


def test_importing_the_protocol_loads_neither_ipython_nor_torch():
    probe = (
        "import sys, jupyter_pause.kernel.remote as r\n"
        "r.call_source('resume', checkpoint='c', session='s', moments={'kernel_ready': 1.5})\n"
        "print(sorted(m for m in ('IPython', 'torch', 'ipykernel', 'jupyter_pause.session') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


# -- replies -------------------------------------------------------------------------------------


def test_each_reply_survives_its_line():
    replies = [
        remote.PauseReply("20260101-120000-a1b2c3", "saved 2 variable(s)\n  skipped 1", ["gen"]),
        remote.ResumeReply("20260101-120000-a1b2c3", "partial", "gen was not restored", "resumed\nverdict"),
        remote.ErrorReply("pause", "StoreError", "cannot write to s3://b: check that the store is reachable"),
    ]
    for reply in replies:
        line = reply.to_line()
        assert line.startswith(remote.PREFIX) and "\n" not in line
        assert remote.Reply.from_json(reply.to_json()) == reply
        assert type(reply).from_json(reply.to_json()) == reply


def test_reply_of_the_wrong_shape_is_refused():
    with pytest.raises(PauseError, match="reply has checkpoint=5, not a str"):
        remote.PauseReply.from_json('{"reply": "pause", "checkpoint": 5}')
    with pytest.raises(PauseError, match="resume reply lacks 'verdict'"):
        remote.ResumeReply.from_json('{"reply": "resume", "checkpoint": "c"}')
    with pytest.raises(PauseError, match="a 'resume' reply where a pause one was due"):
        remote.PauseReply.from_json('{"reply": "resume", "checkpoint": "c", "verdict": "fresh"}')
    with pytest.raises(PauseError, match="not valid JSON"):
        remote.Reply.from_json('{"reply": "pause", ')
    # A newer kernel may add fields: they are ignored, not fatal.
    assert remote.PauseReply.from_json('{"reply": "pause", "checkpoint": "c", "later": 1}').checkpoint == "c"


def test_reply_is_found_among_noise_before_and_after():
    reply = remote.PauseReply("20260101-120000-a1b2c3", "saved")
    output = (
        "Loading weights...\n"
        '{"looks": "like json"}\n'
        "progress 50%" + reply.to_line() + "\n"  # a partial line the user's code left unterminated
        "/usr/lib/python3/warnings.py:1: UserWarning: something\n"
        '"20991231-000000-ffffff"\n'  # the old protocol would have taken this last JSON line
    )
    assert remote.parse_reply(output, remote.PauseReply) == reply


def test_error_reply_becomes_a_pause_error_with_the_kernels_reason():
    line = remote.ErrorReply("pause", "StoreError", "cannot write blob 3: check the store").to_line()
    with pytest.raises(remote.RemoteError, match="^StoreError: cannot write blob 3: check the store$") as info:
        remote.parse_reply(f"noise\n{line}\n", remote.PauseReply)
    assert info.value.error == "StoreError"


def test_missing_reply_says_what_the_kernel_printed_instead():
    with pytest.raises(PauseError, match="sent no pause reply; it printed nothing"):
        remote.parse_reply("  \n", remote.PauseReply)
    with pytest.raises(PauseError, match=r"sent no resume reply; it printed 'Traceback.*NameError: x'"):
        remote.parse_reply("Traceback (most recent call last):\nNameError: x\n", remote.ResumeReply)
    with pytest.raises(PauseError, match="a pause reply where a resume one was due"):
        remote.parse_reply(remote.PauseReply("c").to_line(), remote.ResumeReply)


# -- kernel side, in this process ----------------------------------------------------------------


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line]


def test_a_failing_entry_prints_one_error_reply(capsys):
    remote.pause(session="no spaces allowed")
    (line,) = _lines(capsys.readouterr().out)
    with pytest.raises(remote.RemoteError, match="invalid session name") as info:
        remote.parse_reply(line, remote.PauseReply)
    assert info.value.error == "PauseError"


def test_a_kernel_of_another_version_says_to_align_versions(capsys):
    remote.call(json.dumps({"protocol": 99, "entry": "pause", "args": {}}))
    remote.call(json.dumps({"protocol": remote.PROTOCOL, "entry": "reboot", "args": {}}))
    first, second = _lines(capsys.readouterr().out)
    with pytest.raises(PauseError, match="server speaks protocol 99 .* install the same jupyter-pause version"):
        remote.parse_reply(first, remote.PauseReply)
    with pytest.raises(PauseError, match="no entry point 'reboot' \\(it has pause, resume\\)"):
        remote.parse_reply(second, remote.PauseReply)


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

    out = a.run(remote.call_source("pause", session="remote-test", trigger="button")).ok().stdout
    paused = remote.parse_reply(out, remote.PauseReply)
    assert len(_lines(out)) == 1, out
    assert "checkpoint " + paused.checkpoint in paused.summary and paused.skipped == []
    (manifest,) = Catalog(Store(str(store))).checkpoints("remote-test")
    assert manifest.id == paused.checkpoint and manifest.trigger == "button"
    assert {"answer", "note"} <= {v.name for v in manifest.variables}
    added = set(a.value("sorted(globals())")) - before
    assert all(HISTORY.fullmatch(name) for name in added), f"the call left {added} in the namespace"

    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store))
    moments = {"kernel_stopped": 1.0, "kernel_ready": 2.5}
    source = remote.call_source(
        "resume", checkpoint=paused.checkpoint, session="remote-test", map_location="cpu", moments=moments
    )
    resumed = remote.parse_reply(b.run(source).ok().stdout, remote.ResumeReply)
    assert resumed.checkpoint == paused.checkpoint and resumed.verdict == "restored", resumed
    assert "restored 2 variable(s)" in resumed.summary
    assert b.value("[answer, note]") == [41, 'it\'s "quoted"\n']


@pytest.mark.integration
def test_a_hostile_session_reaches_a_real_kernel_as_data(start_kernel, tmp_path):
    marker = tmp_path / "pwned"
    session = f"x', trigger='button'); open({str(marker)!r}, 'w').write('1'); ('"
    k = start_kernel(tmp_path, JUPYTER_PAUSE_STORE=str(tmp_path / "store"))
    out = k.run(remote.call_source("pause", session=session)).ok().stdout
    with pytest.raises(remote.RemoteError, match="invalid session name") as info:
        remote.parse_reply(out, remote.PauseReply)
    assert info.value.error == "PauseError"
    assert not marker.exists()
