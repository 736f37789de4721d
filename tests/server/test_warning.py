"""The warning before an idle release, on a real Jupyter server: the service gives it, the status
model carries it, and it ends when the user keeps working, runs a cell, changes something, or
the release comes; polls and the server's own code never end it."""

from __future__ import annotations

import json
import time

import pytest
from tornado.httpclient import HTTPClientError

from tests.support.server_helpers import open_kernel, poll_state, run, user_cell, write_notebook

pytestmark = pytest.mark.integration


async def _warning(jp_fetch, method: str = "GET", body: dict | None = None):
    response = await jp_fetch(
        "jupyter-pause",
        "api",
        "release",
        "warning",
        method=method,
        body=None if body is None else json.dumps(body),
        allow_nonstandard_methods=True,
    )
    return response.code, json.loads(response.body)


async def _warn(jp_fetch, seconds: float = 300.0) -> dict:
    code, warning = await _warning(
        jp_fetch, "POST", {"reason": "idle for 2 h", "release_at": time.time() + seconds, "idle_for": 7200}
    )
    assert code == 201, warning
    return warning


async def _overview(jp_fetch) -> dict:
    return json.loads((await jp_fetch("jupyter-pause", "api", "status")).body)


async def _ended(jp_fetch, what: str) -> None:
    async def read() -> dict:
        _, warning = await _warning(jp_fetch)
        return {"state": "pending" if warning else "ended", "detail": json.dumps(warning)}

    await poll_state(read, ("ended",), 30, what)


async def test_a_warning_is_held_shown_in_the_status_and_kept_working_away(jp_fetch, jp_serverapp):
    assert await _warning(jp_fetch) == (200, None)
    given = await _warn(jp_fetch)
    assert given["reason"] == "idle for 2 h" and given["idle_for"] == 7200
    assert 290 < given["seconds_left"] <= 300
    for _ in range(3):  # reading it, and the status polls, are not using the server
        code, held = await _warning(jp_fetch)
        status = await _overview(jp_fetch)
    assert code == 200 and held["warned_at"] == given["warned_at"] and held["seconds_left"] <= given["seconds_left"]
    assert status["warning"]["release_at"] == given["release_at"]

    before = time.time()
    code, answer = await _warning(jp_fetch, "DELETE")
    assert code == 200 and answer["cancelled"]["warned_at"] == given["warned_at"]
    assert await _warning(jp_fetch) == (200, None) and (await _overview(jp_fetch))["warning"] is None
    manager = jp_serverapp.web_app.settings["jupyter_pause"]
    assert manager.user_activity() >= (before, "")  # Keep working counts as activity
    assert manager.warnings.ended["ended"] == "kept"
    assert (await _warning(jp_fetch, "DELETE"))[1] == {"cancelled": None}  # nothing pending: nothing to cancel


async def test_a_cell_run_after_the_warning_ends_it_the_servers_own_code_does_not(jp_fetch, jp_serverapp, jp_root_dir):
    path = write_notebook(jp_root_dir, "work/w.ipynb")
    kernel = await open_kernel(jp_fetch, path)
    await run(jp_serverapp, kernel, "pass")  # the kernel is up: its start-up is not use after the warning
    await _warn(jp_fetch)
    await run(jp_serverapp, kernel, "x = 1")  # the server's own code, as a pause runs it
    assert (await _warning(jp_fetch))[1] is not None
    await user_cell(jp_serverapp, kernel, "y = 2")  # the notebook's cell
    await _ended(jp_fetch, "the warning ended by the cell")
    assert jp_serverapp.web_app.settings["jupyter_pause"].warnings.ended["ended"] == "used"


async def test_a_request_that_changes_something_ends_it(jp_fetch, jp_serverapp, jp_root_dir):
    path = write_notebook(jp_root_dir, "work/saved.ipynb")
    await _warn(jp_fetch)
    await jp_fetch("api", "contents", path, method="GET")  # reading a file is not working
    assert (await _warning(jp_fetch))[1] is not None
    model = json.loads((await jp_fetch("api", "contents", path, method="GET")).body)
    body = json.dumps({"type": "notebook", "format": "json", "content": model["content"]})
    await jp_fetch("api", "contents", path, method="PUT", body=body)  # saving it is
    await _ended(jp_fetch, "the warning ended by a save")


async def test_the_release_ends_the_warning(jp_fetch, jp_serverapp):
    await _warn(jp_fetch)
    await jp_fetch("jupyter-pause", "api", "release", method="POST", body=json.dumps({"trigger": "service"}))
    assert (await _warning(jp_fetch))[1] is None
    manager = jp_serverapp.web_app.settings["jupyter_pause"]
    assert manager.warnings.ended["ended"] == "released"
    await manager.wait()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"release_at": 9e9}, '"reason" must be a non-empty string'),
        ({"reason": " ", "release_at": 9e9}, '"reason" must be a non-empty string'),
        ({"reason": "idle", "release_at": 1.0}, '"release_at" must be the time of the release'),
        ({"reason": "idle", "release_at": "soon"}, '"release_at" must be the time of the release'),
        ({"reason": "idle", "release_at": 9e9, "idle_for": -5}, '"idle_for" must be the seconds'),
        ({"reason": "x" * 501, "release_at": 9e9}, "at most 500 characters"),
    ],
)
async def test_a_bad_warning_is_refused_saying_what_is_wrong_and_nothing_is_held(jp_fetch, body, says):
    with pytest.raises(HTTPClientError) as refused:
        await _warning(jp_fetch, "POST", body)
    assert refused.value.code == 400 and says in json.loads(refused.value.response.body)["message"]
    assert await _warning(jp_fetch) == (200, None)
