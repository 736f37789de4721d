"""Releasing a server outside a Hub: every session paused in parallel, recorded, nothing stopped.

(The Hub's side, stopping the server and resuming on the next one, is in test_hub_release.py.)
"""

from __future__ import annotations

import json
import time

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_pause.store.layout import release_key
from jupyter_pause.store.storage import Store
from tests.support.server_helpers import (
    call,
    open_kernel,
    poll_state,
    run,
    status,
    wait_state,
    write_notebook,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def pause_server():
    return {"busy_timeout": 3.0}  # a cell still running after 3 s makes that session's pause fail


async def overview(jp_fetch) -> dict:
    return json.loads((await jp_fetch("jupyter-pause", "api", "status")).body)


async def release_done(jp_fetch) -> dict:
    """Poll the server's status until its release has ended; the release."""

    async def read() -> dict:
        release = (await overview(jp_fetch))["release"]
        return {**release, "state": release["state"], "detail": release["detail"]}

    return await poll_state(read, ("stopped", "paused", "failed"), 180, "the release")


async def test_a_release_pauses_every_session_at_once_and_says_there_is_no_hub(
    jp_fetch, jp_serverapp, jp_root_dir, store
):
    first = write_notebook(jp_root_dir, "a/one.ipynb")
    second = write_notebook(jp_root_dir, "b/two.ipynb")
    kernels = {first: await open_kernel(jp_fetch, first), second: await open_kernel(jp_fetch, second)}
    for path, kernel in kernels.items():
        await run(jp_serverapp, kernel, f"name = {path!r}\nsquares = [i * i for i in range(5)]")

    before = await overview(jp_fetch)
    assert before["hub"] is None and before["release"] is None and before["resume_on_open"] is False
    assert before["lease"] in ("create-if-absent", "settle")
    assert sorted(s["path"] for s in before["sessions"]) == sorted(kernels)

    started = await call(jp_fetch, "release")
    assert started["state"] == "pausing" and started["trigger"] == "button", started
    with pytest.raises(HTTPClientError) as again:  # one release at a time
        await call(jp_fetch, "release")
    assert again.value.code == 409

    release = await release_done(jp_fetch)
    assert release["state"] == "paused", release
    assert release["server_stop"] == "no-hub" and "no Hub to stop it" in release["detail"], release
    assert sorted(s["path"] for s in release["sessions"]) == sorted(kernels)
    assert all(s["state"] == "paused" and s["checkpoint"] for s in release["sessions"]), release["sessions"]

    # every kernel is gone; each session says which release paused it
    assert json.loads((await jp_fetch("api", "sessions")).body) == []
    for path in kernels:
        session = await status(jp_fetch, path)
        assert session["state"] == "paused" and session["release"] == release["id"], session
    rows = json.loads((await jp_fetch("jupyter-pause", "api", "sessions")).body)
    assert {r["path"]: r["release"] for r in rows["sessions"]} == {p: release["id"] for p in kernels}

    # the store holds the record, as another server would read it
    record = json.loads(bytes(Store(str(store)).read(release_key(release["id"]))))
    assert record["state"] == "paused" and len(record["sessions"]) == 2

    # and the sessions resume as after any pause
    await call(jp_fetch, "resume", path=first)
    resumed = await wait_state(jp_fetch, first, ("ready", "failed"))
    assert resumed["verdict"] == "restored" and resumed["release"] is None, resumed


async def test_a_release_with_one_pause_failing_stops_nothing_and_names_the_session(
    jp_fetch, jp_serverapp, jp_root_dir
):
    idle = write_notebook(jp_root_dir, "idle.ipynb")
    busy = write_notebook(jp_root_dir, "busy.ipynb")
    idle_kernel = await open_kernel(jp_fetch, idle)
    busy_kernel = await open_kernel(jp_fetch, busy)
    await run(jp_serverapp, idle_kernel, "x = 1")
    await _followed(jp_fetch, jp_serverapp, busy_kernel)
    client = jp_serverapp.kernel_manager.get_kernel(busy_kernel).client()
    client.start_channels()
    try:
        client.execute("import time\ntime.sleep(600)")  # a plain cell: no safe point to pause at
        await poll_state(lambda: _kernel_state(jp_fetch, busy_kernel), ("busy",), 60, "the busy kernel")
        await call(jp_fetch, "release", trigger="service")
        release = await release_done(jp_fetch)
    finally:
        await jp_serverapp.kernel_manager.interrupt_kernel(busy_kernel)
        client.stop_channels()

    assert release["state"] == "failed" and release["server_stop"] is None, release
    assert "1 of 2 sessions not paused" in release["detail"] and "busy.ipynb" in release["detail"], release
    rows = {s["path"]: s for s in release["sessions"]}
    assert rows["idle.ipynb"]["state"] == "paused"
    assert rows["busy.ipynb"]["state"] == "failed" and "pause failed" in rows["busy.ipynb"]["detail"]
    running = [s["kernel"]["id"] for s in json.loads((await jp_fetch("api", "sessions")).body)]
    assert running == [busy_kernel]  # the session that could not be paused keeps its kernel


async def _kernel_state(jp_fetch, kernel_id: str) -> dict:
    model = json.loads((await jp_fetch("api", "kernels", kernel_id)).body)
    return {"state": model["execution_state"], "detail": ""}


async def _followed(jp_fetch, jp_serverapp, kernel_id: str, timeout: float = 60) -> None:
    """Run empty cells until the server's view of the kernel says idle: its listener on the
    kernel's output has joined (one that joins after a cell began never sees it busy)."""
    deadline = time.monotonic() + timeout
    while (await _kernel_state(jp_fetch, kernel_id))["state"] != "idle":
        assert time.monotonic() < deadline, f"the server never followed kernel {kernel_id}'s state"
        await run(jp_serverapp, kernel_id, "pass")


async def test_resume_pulls_a_notebook_this_server_does_not_have(jp_fetch, jp_serverapp, jp_root_dir):
    path = write_notebook(jp_root_dir, "fresh/pod.ipynb", "print('hello')")
    kernel = await open_kernel(jp_fetch, path)
    await run(jp_serverapp, kernel, "answer = 42")
    await call(jp_fetch, "pause", path=path)
    assert (await wait_state(jp_fetch, path, ("paused", "failed")))["state"] == "paused"
    (jp_root_dir / path).unlink()  # as on a new pod without the old disk

    await call(jp_fetch, "resume", path=path)
    resumed = await wait_state(jp_fetch, path, ("ready", "failed"))
    assert resumed["verdict"] == "restored", resumed
    assert (jp_root_dir / path).exists()
    kernel = json.loads((await jp_fetch("api", "sessions")).body)[0]["kernel"]["id"]
    assert (await run(jp_serverapp, kernel, "print(answer)")).strip() == "42"


async def test_release_and_resume_refuse_what_they_cannot_do(jp_fetch, jp_root_dir):
    with pytest.raises(HTTPClientError) as bad:
        await call(jp_fetch, "release", trigger="cron")
    assert bad.value.code == 400 and "trigger" in bad.value.response.body.decode()
    with pytest.raises(HTTPClientError) as missing:
        await call(jp_fetch, "resume", path="never/was.ipynb")
    assert missing.value.code == 404
    assert "not on this server, and no checkpoint holds it" in missing.value.response.body.decode()
