"""The server-kernel protocol: each message survives the wire, values travel as data, and what a
kernel cannot read (another version, an unknown entry, a field of the wrong type) is refused clearly."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from jupyter_pause.errors import PauseError
from jupyter_pause.protocol import (
    PREFIX,
    PROTOCOL,
    ErrorReply,
    HoldReply,
    HoldRequest,
    PauseReply,
    PauseRequest,
    RemoteError,
    Reply,
    ResumeReply,
    ResumeRequest,
    SafePointRequest,
    call_source,
    decode_reply,
    decode_request,
    encode_request,
    parse_reply,
    reply_line,
)
from jupyter_pause.protocol.wire import KERNEL_MODULE, reply_json
from tests.support.hostile import HOSTILE

ALIGN = "install the same jupyter-pause version in the kernel's environment as in the server's"


def _request_text(entry: object, args: object, protocol: object = PROTOCOL) -> str:
    return json.dumps({"protocol": protocol, "entry": entry, "args": args})


# -- requests ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        PauseRequest("train"),
        PauseRequest("train", "spot"),
        ResumeRequest("20260101-120000-a1b2c3", "train"),
        ResumeRequest("20260101-120000-a1b2c3", "train", "cpu", {"kernel_stopped": 1.0, "kernel_ready": 2.5}),
        HoldRequest("20260101-120000-a1b2c3", "train"),
        HoldRequest("20260101-120000-a1b2c3", "train", '{"manifest": {}}'),
    ],
)
def test_each_request_survives_the_wire(request_):
    assert decode_request(encode_request(request_)) == request_


def test_a_safe_point_request_travels_as_the_pause_request_it_is():
    request = SafePointRequest("train", "button", requested=1.5)
    assert isinstance(request, PauseRequest) and request.entry == "pause"
    assert json.loads(encode_request(request))["args"] == {"session": "train", "trigger": "button"}
    assert decode_request(encode_request(request)) == PauseRequest("train", "button")


def test_the_request_format_is_version_7():
    """What travels: version 2 added the resume's ``paused_from`` and ``allow_partial``, version 3
    the server's decision (``candidates``, ``passed_over``, ``taken``) for the kernel to follow,
    version 4 the slow ``imports`` it begins at once, version 5 the manifests the server read
    (``manifests``) and ``report_by_server``, version 6 the files of those imports
    (``import_files``) for the kernel to read ahead, version 7 the ``hold`` entry (a waiting
    resume's kernel reads its checkpoint ahead); a kernel of another version refuses it by
    its version, saying to align the two."""
    assert PROTOCOL == 7
    request = ResumeRequest(
        "latest",
        "s",
        paused_from="c",
        candidates=["b", "a"],
        passed_over={"c": "why"},
        imports=["torch"],
        import_files={"torch": ["__init__.py", "_C.so"]},
        manifests={"b": '{"manifest":{}}'},
        report_by_server=True,
    )
    wire = json.loads(encode_request(request))
    args = wire["args"]
    assert (wire["protocol"], wire["entry"]) == (7, "resume")
    assert {k: args[k] for k in ("checkpoint", "session", "map_location", "moments", "paused_from")} == {
        "checkpoint": "latest",
        "session": "s",
        "map_location": "auto",
        "moments": {},
        "paused_from": "c",
    }
    assert (args["allow_partial"], args["candidates"], args["passed_over"], args["taken"], args["imports"]) == (
        False,
        ["b", "a"],
        {"c": "why"},
        {},
        ["torch"],
    )
    assert (args["manifests"], args["report_by_server"]) == ({"b": '{"manifest":{}}'}, True)
    assert args["import_files"] == {"torch": ["__init__.py", "_C.so"]}
    assert decode_request(encode_request(request)) == request
    plain = decode_request(_request_text("resume", {"checkpoint": "c", "session": "s"}))
    assert plain == ResumeRequest("c", "s") and (plain.manifests, plain.report_by_server) == ({}, False)
    assert plain.import_files == {}
    with pytest.raises(PauseError, match="import_files"):
        decode_request(_request_text("resume", {"checkpoint": "c", "session": "s", "import_files": {"torch": "x"}}))


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_travel_as_data_never_as_code(value):
    request = ResumeRequest(value, value, value, {value: 1.0})
    source = call_source(request)
    assert "\n" not in source and source.isascii()
    (statement,) = ast.parse(source).body
    call = statement.value
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "call"
    importer = call.func.value
    assert isinstance(importer, ast.Call) and importer.func.id == "__import__"
    assert importer.args[0].value == KERNEL_MODULE == "jupyter_pause.kernel.remote"
    (argument,) = call.args
    assert isinstance(argument, ast.Constant) and isinstance(argument.value, str)
    # Every name the line uses is the import; nothing from the value became code.
    assert {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)} == {"__import__"}
    assert decode_request(argument.value) == request


def test_a_kernel_of_another_version_refuses_with_what_to_do():
    with pytest.raises(PauseError, match=f"server speaks protocol 99 and this kernel's .* speaks {PROTOCOL}: {ALIGN}$"):
        decode_request(_request_text("pause", {"session": "s"}, protocol=99))
    with pytest.raises(PauseError, match="server speaks protocol None"):
        decode_request("[1, 2]")
    with pytest.raises(PauseError, match=f"not valid JSON .*{ALIGN}"):
        decode_request('{"protocol": 1, ')


def test_an_unknown_entry_is_refused():
    with pytest.raises(PauseError, match=rf"no entry point 'reboot' \(it has pause, resume, hold\): {ALIGN}"):
        decode_request(_request_text("reboot", {}))
    with pytest.raises(PauseError, match=f"pause request has args=\\['s'\\], not an object: {ALIGN}"):
        decode_request(_request_text("pause", ["s"]))


@pytest.mark.parametrize(
    ("entry", "args", "complaint"),
    [
        ("pause", {"session": 5}, "has session=5, not a str"),
        ("pause", {"trigger": "button"}, "lacks 'session'"),
        ("pause", {"session": "s", "sesion": "s"}, "has sesion, which this version does not know"),
        (
            "resume",
            {"checkpoint": "c", "session": "s", "moments": {"t": "soon"}},
            "has moments=.*, not a dict\\[str, float\\]",
        ),
        ("resume", {"checkpoint": "c", "session": "s", "moments": [1.0]}, "has moments=\\[1.0\\], not a dict"),
        ("resume", {"checkpoint": True, "session": "s"}, "has checkpoint=True, not a str"),
    ],
)
def test_a_field_of_the_wrong_shape_is_refused(entry, args, complaint):
    with pytest.raises(PauseError, match=f"the server's {entry} request {complaint}.*{ALIGN}"):
        decode_request(_request_text(entry, args))


def test_the_server_refuses_to_send_what_a_kernel_could_not_read():
    with pytest.raises(PauseError, match="cannot send the resume request .*not JSON compliant"):
        encode_request(ResumeRequest("c", "s", moments={"t": float("nan")}))
    with pytest.raises(PauseError, match="has session=5, not a str"):
        encode_request(PauseRequest(5))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        PauseRequest(sesion="a")  # type: ignore[call-arg]


# -- replies -------------------------------------------------------------------------------------

REPLIES = [
    PauseReply("20260101-120000-a1b2c3", "saved 2 variable(s)\n  skipped 1", ["gen"]),
    ResumeReply("20260101-120000-a1b2c3", "partial", "gen was not restored", "resumed\nverdict", {"a": [1]}),
    HoldReply("20260101-120000-a1b2c3", 3, 1024, {"sha": "missing"}),
    ErrorReply("pause", "StoreError", "cannot write to s3://b: check that the store is reachable"),
]


@pytest.mark.parametrize("reply", REPLIES)
def test_each_reply_survives_its_line(reply):
    line = reply_line(reply)
    assert line.startswith(PREFIX) and "\n" not in line and line.isascii()
    assert decode_reply(reply_json(reply)) == reply
    assert decode_reply(reply_json(reply), type(reply)) == reply
    if not isinstance(reply, ErrorReply):
        assert parse_reply(line, type(reply)) == reply


def test_replies_are_built_from_what_the_engine_returns():
    class Result:
        manifest = type("Manifest", (), {"id": "ck1"})()
        skipped = [type("Skip", (), {"name": "gen"})()]

        def summary(self) -> str:
            return "saved"

    assert PauseReply.of(Result()) == PauseReply("ck1", "saved", ["gen"])
    assert ErrorReply.of("resume", KeyError("x")) == ErrorReply("resume", "KeyError", "'x'")


def test_a_pause_reply_says_what_will_not_come_back_elsewhere_in_one_short_line():
    lines = [f"v{i} (x): rebuilt by replay, unproven" for i in range(5)]
    reply = PauseReply("ck1", "saved", elsewhere=lines)
    assert decode_reply(reply_json(reply), PauseReply) == reply
    assert reply.elsewhere_note() == (
        "; not on another node, or not provably: v0 (x): rebuilt by replay, unproven; "
        "v1 (x): rebuilt by replay, unproven; v2 (x): rebuilt by replay, unproven; "
        "and 2 more (jupyter pause show ck1)"
    )
    assert PauseReply("ck1").elsewhere_note() == ""


def test_a_reply_of_the_wrong_shape_is_refused():
    with pytest.raises(RemoteError, match="reply has checkpoint=5, not a str"):
        decode_reply('{"reply": "pause", "checkpoint": 5}', PauseReply)
    with pytest.raises(RemoteError, match=r"reply has skipped=\['a', 2\], not a list\[str\]"):
        decode_reply('{"reply": "pause", "checkpoint": "c", "skipped": ["a", 2]}')
    with pytest.raises(RemoteError, match="resume reply lacks 'verdict'"):
        decode_reply('{"reply": "resume", "checkpoint": "c"}', ResumeReply)
    with pytest.raises(RemoteError, match="a 'resume' reply where a pause one was due"):
        decode_reply('{"reply": "resume", "checkpoint": "c", "verdict": "fresh"}', PauseReply)
    with pytest.raises(RemoteError, match="a 'reboot' reply where a known one was due"):
        decode_reply('{"reply": "reboot"}', Reply)
    with pytest.raises(RemoteError, match="not valid JSON"):
        decode_reply('{"reply": "pause", ')
    # A newer kernel may add fields: they are ignored, not fatal.
    assert decode_reply('{"reply": "pause", "checkpoint": "c", "later": 1}', PauseReply).checkpoint == "c"


def test_reply_is_found_among_noise_before_and_after():
    reply = PauseReply("20260101-120000-a1b2c3", "saved")
    output = (
        "Loading weights...\n"
        '{"looks": "like json"}\n'
        "progress 50%" + reply_line(reply) + "\n"  # a partial line the user's code left unterminated
        "/usr/lib/python3/warnings.py:1: UserWarning: something\n"
        '"20991231-000000-ffffff"\n'  # the old protocol would have taken this last JSON line
    )
    assert parse_reply(output, PauseReply) == reply


def test_error_reply_becomes_a_pause_error_with_the_kernels_reason():
    line = reply_line(ErrorReply("pause", "StoreError", "cannot write blob 3: check the store"))
    with pytest.raises(RemoteError, match="^StoreError: cannot write blob 3: check the store$") as info:
        parse_reply(f"noise\n{line}\n", PauseReply)
    assert info.value.error == "StoreError"


def test_missing_reply_says_what_the_kernel_printed_instead():
    with pytest.raises(PauseError, match="sent no pause reply; it printed nothing"):
        parse_reply("  \n", PauseReply)
    with pytest.raises(PauseError, match=r"sent no resume reply; it printed 'Traceback.*NameError: x'"):
        parse_reply("Traceback (most recent call last):\nNameError: x\n", ResumeReply)
    with pytest.raises(PauseError, match="a pause reply where a resume one was due"):
        parse_reply(reply_line(PauseReply("c")), ResumeReply)


# -- layering ------------------------------------------------------------------------------------


def test_importing_the_protocol_loads_neither_ipython_nor_torch():
    probe = (
        "import sys, jupyter_pause.protocol as p\n"
        "from jupyter_pause.protocol import channel\n"
        "p.call_source(p.ResumeRequest('c', 's', moments={'kernel_ready': 1.5}))\n"
        "heavy = ('IPython', 'torch', 'ipykernel', 'jupyter_pause.session', 'jupyter_pause.kernel')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_a_resume_request_rebuilds_unless_it_says_not_to():
    """``rebuild`` has a default: a server that does not send it gets the rebuild, as before."""
    assert decode_request(_request_text("resume", {"checkpoint": "c", "session": "s"})).rebuild is True
    off = ResumeRequest("c", "s", rebuild=False)
    assert decode_request(encode_request(off)) == off
    with pytest.raises(PauseError, match="rebuild='no', not a bool"):
        decode_request(_request_text("resume", {"checkpoint": "c", "session": "s", "rebuild": "no"}))
