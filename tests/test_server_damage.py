"""The server's sessions and resume with damaged manifests, on a real Jupyter server: damage is
named ("damaged": checkpoint and why, and in the detail), a resume of "latest" uses the newest
intact checkpoint and says so, one asked for by id is refused saying why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.notebook import session_from_path
from tests.damage import KINDS, WHY, damage, key_for
from tests.processes import another_process
from tests.server_helpers import call, server_config, wait_state, write_notebook

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("new_process")]

PATH = "work/damaged.ipynb"


@pytest.fixture(params=["checksum"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def jp_server_config(store: Path, kind: str) -> dict[str, Any]:
    config = server_config(str(store))
    config["PauseConfig"]["signing_key"] = key_for(kind) or ""
    return config


def _two_checkpoints(store: Path, kind: str, damaged: int = 1) -> tuple[Any, Any, str]:
    """Two checkpoints of the notebook's session, the newest ``damaged`` of them damaged as ``kind``."""
    session = session_from_path(PATH)
    config = PauseConfig(signing_key=key_for(kind) or "")
    taken = [
        jp.checkpoint(store=str(store), session=session, namespace={"n": n}, config=config).manifest for n in (1, 2)
    ]
    for manifest in taken[::-1][:damaged]:
        damage(store, session, manifest.id, kind)
    another_process()
    return taken[0], taken[1], session


async def _sessions(jp_fetch: Any, session: str) -> dict[str, Any]:
    listing = json.loads((await jp_fetch("jupyter-pause", "api", "sessions")).body)
    (row,) = [r for r in listing["sessions"] if r["session"] == session]
    return row


async def _refused(coro: Any) -> tuple[int, str]:
    with pytest.raises(HTTPClientError) as info:
        await coro
    return info.value.code, json.loads(info.value.response.body)["message"]


@pytest.mark.parametrize("kind", KINDS, indirect=True)
async def test_sessions_name_the_damage_and_a_damaged_checkpoint_asked_for_is_refused(
    jp_fetch, jp_root_dir, store, kind
):
    write_notebook(jp_root_dir, PATH, "n = 0")
    first, second, session = _two_checkpoints(store, kind)
    row = await _sessions(jp_fetch, session)
    assert row["checkpoint"] == first.id and row["state"] == "paused"
    assert [d["checkpoint"] for d in row["damaged"]] == [second.id]
    assert row["damaged"][0]["why"].startswith(WHY[kind]), row
    assert f"checkpoint {second.id} is damaged: {WHY[kind]}" in row["detail"]
    assert f"a resume uses {first.id}, the newest intact checkpoint" in row["detail"]

    code, message = await _refused(call(jp_fetch, "resume", path=PATH, checkpoint=second.id))
    assert code == 409 and f"checkpoint {second.id} of session {session!r} is damaged: {WHY[kind]}" in message
    assert f"the newest intact checkpoint is {first.id}" in message


async def test_every_checkpoint_damaged_is_said_so_never_no_checkpoint(jp_fetch, jp_root_dir, store, kind):
    write_notebook(jp_root_dir, PATH, "n = 0")
    first, second, session = _two_checkpoints(store, kind, damaged=2)
    row = await _sessions(jp_fetch, session)
    assert row["checkpoint"] is None and len(row["damaged"]) == 2
    assert row["detail"].startswith("every checkpoint is damaged: ") and WHY[kind] in row["detail"]
    code, message = await _refused(call(jp_fetch, "resume", path=PATH))
    assert code == 409 and f"every checkpoint of session {session!r}" in message, message
    assert "no checkpoint of session" not in message


async def test_resume_of_latest_uses_the_newest_intact_and_says_so(jp_fetch, jp_root_dir, store, kind, jp_serverapp):
    write_notebook(jp_root_dir, PATH, "n = 0")
    first, second, _ = _two_checkpoints(store, kind)
    note = f"checkpoint {second.id} is damaged: {WHY[kind]}"
    started = await call(jp_fetch, "resume", path=PATH)
    assert started["checkpoint"] == first.id and note in started["detail"], started
    done = await wait_state(jp_fetch, PATH, ("ready", "failed"))
    assert done["state"] == "ready" and done["checkpoint"] == first.id, done
    assert note in done["detail"] and f"using {first.id}, the newest intact checkpoint, instead" in done["detail"]
    await jp_serverapp.web_app.settings["jupyter_pause"].wait()
