"""Hostile and malformed input everywhere a person or a program reaches: a clear error, no change."""

from __future__ import annotations

import json

import pytest
from tornado.httpclient import HTTPClientError

import jupyter_pause as jp
from jupyter_pause.cli import main
from jupyter_pause.errors import PauseError
from tests.support.processes import another_process
from tests.support.server_helpers import call, write_notebook

pytestmark = pytest.mark.usefixtures("new_process")

HUGE = "x" * 10_000_000
NAMES = ["../escape", "/etc", "a/b", " ", HUGE, "bad\udcffname", "naïve", "-leading", "x" * 129]


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


@pytest.mark.parametrize("name", NAMES, ids=lambda n: repr(n[:12]) + f"/{len(n)}")
def test_hostile_session_names_are_refused_and_write_nothing(tmp_path, name):
    store = tmp_path / "store"
    with pytest.raises(PauseError) as info:
        jp.checkpoint(store=str(store), session=name, namespace={"x": 1})
    message = str(info.value)
    assert "invalid session name" in message or "no checkpoint" in message
    assert len(message) < 400  # a 10 MB name is not echoed back whole
    assert not list(store.rglob("*.json"))
    another_process()
    with pytest.raises(PauseError):
        jp.resume(store=str(store), session=name, namespace={})


def test_tag_and_names_of_absurd_size_are_refused(tmp_path):
    store = tmp_path / "store"
    with pytest.raises(PauseError, match="tag"):
        jp.checkpoint(store=str(store), session="s", namespace={"x": 1}, tag=HUGE)
    with pytest.raises(PauseError, match="no variable named"):
        jp.checkpoint(["x", "y" * 1000], store=str(store), session="s", namespace={"x": 1})
    assert not list(store.rglob("*.json"))


def test_credentials_in_store_urls_never_reach_output(tmp_path, capsys):
    url = "s3://AKIDSECRET:hunter2pass@127.0.0.1:1/bucket"
    code = main(["list", "--store", url])
    out, err = capsys.readouterr()
    assert code == 2 and "hunter2pass" not in out + err and "AKIDSECRET" not in out + err
    with pytest.raises(PauseError) as info:
        jp.checkpoint(store="nosuch://user:hunter2pass@host/x", session="s", namespace={"x": 1})
    assert "hunter2pass" not in str(info.value)


@pytest.mark.parametrize(
    "argv",
    [
        ["gc", "--keep", "0"],
        ["gc", "--keep", "-3"],
        ["gc", "--keep", "many"],
        ["gc", "--older-than", "-5d"],
        ["show"],
        ["verify", "--session", HUGE],
        ["list", "--session", "../../etc"],
        ["drill", "/nonexistent/notebook.ipynb"],
    ],
    ids=lambda a: " ".join(x[:12] for x in a),
)
def test_cli_bad_arguments_fail_clearly(tmp_path, capsys, argv):
    try:
        code = main([*argv, "--store", str(tmp_path / "store")])
    except SystemExit as e:  # argparse's own usage errors
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.strip() and "Traceback" not in err and len(err) < 2000
    assert not (tmp_path / "store" / "sessions").exists()


@pytest.fixture
def jp_server_config(tmp_path):
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_pause": True}},
        "PauseConfig": {"store": str(tmp_path / "store"), "node": "n"},
        "PauseServer": {"lease_settle": 0.2},
    }


@pytest.mark.integration
@pytest.mark.parametrize(
    ("verb", "body"),
    [
        ("pause", {"path": "../../etc/passwd"}),
        ("pause", {"path": "/etc/passwd"}),
        ("pause", {"path": HUGE}),
        ("pause", {"path": 123}),
        ("pause", {"path": None}),
        ("pause", {"path": ["a.ipynb"]}),
        ("resume", {"path": "nb.ipynb", "checkpoint": 123}),
        ("resume", {"path": "nb.ipynb", "map_location": "gpu"}),
        ("resume", {"path": "nb.ipynb", "force": "yes"}),
        ("resume", {"path": "../nb.ipynb"}),
        ("pull", {"session": "../escape"}),
        ("pull", {"session": HUGE}),
        ("pull", {"session": 5}),
        ("pull", {"session": "nb", "overwrite": "please"}),
        ("pull", {"session": "nb", "path": HUGE}),
        ("pull", {"session": "nb", "path": 7}),
    ],
    ids=lambda v: v if isinstance(v, str) else json.dumps(v)[:40],
)
async def test_rest_hostile_fields_get_4xx_and_change_nothing(jp_fetch, jp_root_dir, tmp_path, verb, body):
    write_notebook(jp_root_dir, "nb.ipynb", "x = 1")
    before = _files(jp_root_dir), _files(tmp_path / "store")
    with pytest.raises(HTTPClientError) as info:
        await call(jp_fetch, verb, **body)
    assert 400 <= info.value.code < 500, info.value
    message = json.loads(info.value.response.body)["message"]
    assert message and len(message) < 2000
    assert (_files(jp_root_dir), _files(tmp_path / "store")) == before


@pytest.mark.integration
async def test_rest_body_that_is_not_an_object(jp_fetch):
    for raw in ("[1, 2]", "null", '"path"', "{not json"):
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch("jupyter-pause", "api", "pause", method="POST", body=raw)
        assert info.value.code == 400


@pytest.mark.integration
async def test_status_with_a_hostile_path(jp_fetch):
    for path in ("../../etc/passwd", HUGE[:5_000]):
        response = await jp_fetch("jupyter-pause", "api", "status", params={"path": path}, raise_error=False)
        assert response.code in (200, 400)
        if response.code == 200:
            assert json.loads(response.body)["checkpoint"] is None


MAGIC_LINES = {
    "%checkpoint --session ../../etc": "invalid session name",
    "%checkpoint --session /abs/path": "invalid session name",
    "%checkpoint --session " + "s" * 200: "invalid session name",
    "%checkpoint --tag " + "t" * 5000: "keep it under 1000",
    "%checkpoint nosuch_variable": "no variable named nosuch_variable",
    "%checkpoint --every -1": "positive number of minutes",
    "%checkpoint --every soon": "--every takes minutes",
    "%checkpoint --store nosuch://user:hunter2pass@h/x": "cannot open store nosuch://***@h/x",
    "%checkpoint --bogus-option": "unrecognized arguments",
    "%resume --session ../x": "invalid session name",
    "%resume --map-location gpu": "invalid choice",
    "%resume --only": "expected at least one argument",
    "%resume 1999": "no checkpoint of session",
    "%resume --check --session nothing-here": "no checkpoint of session 'nothing-here'",
}


@pytest.mark.integration
def test_magic_options_hostile_values(start_kernel, tmp_path):
    store = tmp_path / "store"
    (tmp_path / "a").mkdir()
    kernel = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="bad")
    kernel.run("%load_ext jupyter_pause\nkept = 7").ok()
    for line, message in MAGIC_LINES.items():
        result = kernel.run(line)
        assert result.ename == "UsageError", (line[:60], result.ename, result.error)
        assert message in result.error, (line[:60], result.error[:300])
        assert "hunter2pass" not in result.error + result.stdout
    assert kernel.value("kept") == 7
    # nothing was written but the kernel's own start in the GPU-hours ledger
    assert [p for p in store.rglob("*.json") if "ledger" not in p.relative_to(store).parts] == []
