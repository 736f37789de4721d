"""Rebuild by replay through the server's resume path, with a real Jupyter server and real kernels:
what the checkpoint could not save is rebuilt in the kernel the server starts, unless
``PauseServer.rebuild`` is off."""

from __future__ import annotations

import hashlib

import pytest

from tests.support.server_helpers import call, open_kernel, run, user_cell, wait_state, write_notebook

pytestmark = pytest.mark.integration


@pytest.fixture
def pause_server(rebuild):
    return {"rebuild": rebuild}


@pytest.mark.parametrize("rebuild", [True, False])
async def test_the_servers_resume_rebuilds_what_could_not_be_saved(jp_fetch, jp_serverapp, jp_root_dir, rebuild):
    path = write_notebook(jp_root_dir, "work/hash.ipynb", "x = 1")
    kernel = await open_kernel(jp_fetch, path)
    await user_cell(jp_serverapp, kernel, "%load_ext jupyter_pause")
    await user_cell(
        jp_serverapp, kernel, "import hashlib\nh = hashlib.sha256(b'one')\ngen = (i for i in range(10))\nkept = 7"
    )
    await user_cell(jp_serverapp, kernel, "h.update(b'two')\nnext(gen)\nnext(gen)")
    await call(jp_fetch, "pause", path=path)
    paused = await wait_state(jp_fetch, path, ("paused", "failed"))
    assert paused["state"] == "paused", paused

    await call(jp_fetch, "resume", path=path)
    ready = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert ready["state"] == "ready" and ready["verdict"] == "restored", ready
    (new,) = [s["kernel"]["id"] for s in (await _sessions(jp_fetch)) if s["path"] == path]
    output = await run(jp_serverapp, new, "print(kept, 'h' in globals(), 'gen' in globals())")
    if not rebuild:
        assert output.split() == ["7", "False", "False"]
        return
    assert output.split() == ["7", "True", "True"]
    got = await run(jp_serverapp, new, "print(h.hexdigest(), next(gen))")
    assert got.split() == [hashlib.sha256(b"onetwo").hexdigest(), "2"]
    # The resumed kernel records its own cells: its next checkpoint still rebuilds both.
    await user_cell(jp_serverapp, new, "next(gen)")
    saved = await run(
        jp_serverapp, new, "print(__import__('jupyter_pause').checkpoint(session='work--hash').summary())"
    )
    assert "gen (generator): rebuilt on resume from 4 statement(s)" in saved, saved
    assert "h (_hashlib.HASH): rebuilt on resume from 2 statement(s)" in saved, saved


async def _sessions(fetch):
    import json

    return json.loads((await fetch("api", "sessions")).body)
