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
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store
from tests.support.damage import KINDS, WHY, damage, key_for
from tests.support.processes import another_process
from tests.support.server_helpers import call, open_kernel, run, server_config, wait_state, write_notebook

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("new_process")]

PATH = "work/damaged.ipynb"


@pytest.fixture(params=["checksum"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


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


# -- a damaged blob (the manifest intact): the server's resume chooses as %resume does ----------------

BIG = "import numpy as np\nbig = np.zeros(200_000)\nmarker = 1\n"
NEWER = "big = big + 1\nmarker = 2\n"


async def _blob_damaged(jp_fetch: Any, jp_serverapp: Any, root: Path, store: Path) -> tuple[Any, Any, str]:
    """Two checkpoints the notebook's kernel takes (``big`` then ``big + 1``, ``marker`` 1 then 2),
    the kernel shut down, and the newest blob of ``big`` flipped on disk, as a bad sector would."""
    write_notebook(root, PATH, BIG, NEWER)
    kernel = await open_kernel(jp_fetch, PATH)
    await run(jp_serverapp, kernel, BIG + "%load_ext jupyter_pause\n%checkpoint")
    await run(jp_serverapp, kernel, NEWER + "%checkpoint")
    for s in json.loads((await jp_fetch("api", "sessions")).body):
        await jp_fetch("api", "sessions", s["id"], method="DELETE")
    session = session_from_path(PATH)
    second, first = Catalog(Store(str(store))).checkpoints(session)
    path = store / second.blob_key(_big_blob(second))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(data)
    return first, second, session


async def _values(jp_fetch: Any, jp_serverapp: Any, path: str) -> list[Any]:
    sessions = json.loads((await jp_fetch("api", "sessions")).body)
    (kernel,) = [s["kernel"]["id"] for s in sessions if s["path"] == path]
    out = await run(jp_serverapp, kernel, "import json; print(json.dumps([marker, float(big[0])]))")
    return json.loads(out)


async def test_a_damaged_blob_in_the_newest_is_passed_over_and_named_by_the_servers_resume(
    jp_fetch, jp_root_dir, store, jp_serverapp
):
    first, second, session = await _blob_damaged(jp_fetch, jp_serverapp, jp_root_dir, store)
    await call(jp_fetch, "resume", path=PATH)
    done = await wait_state(jp_fetch, PATH, ("ready", "failed"))
    assert done["state"] == "ready" and done["verdict"] == "restored" and done["checkpoint"] == first.id, done
    assert f"checkpoint {second.id} is damaged: blob " in done["detail"], done
    assert "(array data of big) checksum mismatch" in done["detail"], done
    assert await _values(jp_fetch, jp_serverapp, PATH) == [1, 0.0]
    await jp_serverapp.web_app.settings["jupyter_pause"].wait()

    # The sessions panel agrees with what the resume did: the damaged one named, the one used shown.
    row = await _sessions(jp_fetch, session)
    assert row["checkpoint"] == first.id, row
    (found,) = [d for d in row["damaged"] if d["checkpoint"] == second.id]
    assert found["why"].startswith("blob ") and "(array data of big) checksum mismatch" in found["why"], row

    # The next resume of the same session is told, and reads none of the damaged blobs again.
    for s in json.loads((await jp_fetch("api", "sessions")).body):
        await jp_fetch("api", "sessions", s["id"], method="DELETE")
    (store / second.blob_key(_big_blob(second))).unlink()  # read again, it would say "missing"
    started = await call(jp_fetch, "resume", path=PATH)
    assert started["checkpoint"] == first.id and f"checkpoint {second.id} is damaged: blob " in started["detail"]
    done = await wait_state(jp_fetch, PATH, ("ready", "failed"))
    assert done["verdict"] == "restored" and "checksum mismatch" in done["detail"] and "missing" not in done["detail"]
    assert await _values(jp_fetch, jp_serverapp, PATH) == [1, 0.0]
    await jp_serverapp.web_app.settings["jupyter_pause"].wait()


def _big_blob(manifest: Any) -> str:
    (big,) = [v for v in manifest.variables if v.name == "big"]
    return str(manifest.arrays[big.arrays[0]].blob)


async def test_pull_and_resume_on_a_fresh_server_passes_the_damaged_blob_over_too(
    jp_fetch, jp_root_dir, store, jp_serverapp
):
    """The notebook is not on this server (a new pod without a volume): it is pulled, then resumed."""
    first, second, _ = await _blob_damaged(jp_fetch, jp_serverapp, jp_root_dir, store)
    (jp_root_dir / PATH).unlink()
    await call(jp_fetch, "resume", path=PATH)
    done = await wait_state(jp_fetch, PATH, ("ready", "failed"))
    assert (jp_root_dir / PATH).exists()
    assert done["verdict"] == "restored" and done["checkpoint"] == first.id, done
    assert f"checkpoint {second.id} is damaged" in done["detail"]
    assert await _values(jp_fetch, jp_serverapp, PATH) == [1, 0.0]
    await jp_serverapp.web_app.settings["jupyter_pause"].wait()


async def test_a_checkpoint_with_a_damaged_blob_asked_for_by_id_is_refused_with_409_and_starts_nothing(
    jp_fetch, jp_root_dir, store, jp_serverapp
):
    first, second, session = await _blob_damaged(jp_fetch, jp_serverapp, jp_root_dir, store)
    code, message = await _refused(call(jp_fetch, "resume", path=PATH, checkpoint=second.id))
    assert code == 409, message
    assert f"checkpoint {second.id} of session {session!r} is damaged: blob " in message
    assert "(array data of big) checksum mismatch" in message
    assert f"the newest intact checkpoint is {first.id}" in message and "allow_partial" in message
    assert json.loads((await jp_fetch("api", "sessions")).body) == []  # no kernel was started

    await call(jp_fetch, "resume", path=PATH, checkpoint=second.id, allow_partial=True)
    done = await wait_state(jp_fetch, PATH, ("ready", "failed"))
    assert done["state"] == "ready" and done["verdict"] == "partial", done
    assert "not back: big" in done["detail"], done
    sessions = json.loads((await jp_fetch("api", "sessions")).body)
    (kernel,) = [s["kernel"]["id"] for s in sessions if s["path"] == PATH]
    assert json.loads(await run(jp_serverapp, kernel, "import json; print(json.dumps([marker, 'big' in dir()]))")) == [
        2,
        False,
    ]
    await jp_serverapp.web_app.settings["jupyter_pause"].wait()


async def test_every_checkpoint_with_a_damaged_blob_fails_the_resume_saying_so(
    jp_fetch, jp_root_dir, store, jp_serverapp
):
    first, second, session = await _blob_damaged(jp_fetch, jp_serverapp, jp_root_dir, store)
    (store / first.blob_key(_big_blob(first))).unlink()
    await call(jp_fetch, "resume", path=PATH)
    done = await wait_state(jp_fetch, PATH, ("ready", "failed"))
    assert done["state"] == "failed", done
    assert f"every checkpoint of session {session!r} is damaged ({second.id}: blob " in done["detail"], done
    assert f"{first.id}: blob " in done["detail"] and "allow_partial" in done["detail"]
    await jp_serverapp.web_app.settings["jupyter_pause"].wait()
